"""The suite's order under pytest-xdist: tests marked `heavy(seconds)` (a long chain of subprocesses: the tiny
pipeline, the original README's commands, multi-rank jobs that resume; `seconds` their CPU time, roughly) are
handed out first, the longest first, so that none of them starts near the end and runs on alone while the other
workers sit idle."""



def pytest_configure(config):
    config.addinivalue_line("markers", "heavy(seconds): a test of many subprocesses, scheduled first, the longest "
                                       "first (tests/conftest.py)")


def pytest_collection_modifyitems(session, config, items):
    def weight(item) -> float:
        mark = item.get_closest_marker("heavy")
        return -mark.args[0] if mark is not None else 0.0

    items.sort(key=weight)  # stable: the rest keep their order
