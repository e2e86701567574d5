"""The suite's order under pytest-xdist: tests marked `heavy` (a long chain of subprocesses: the tiny pipeline,
the original README's commands, multi-rank jobs that resume) are handed out first, so that none of them starts
near the end and runs on alone while the other workers sit idle."""



def pytest_configure(config):
    config.addinivalue_line("markers", "heavy: a test of many subprocesses, scheduled first (tests/conftest.py)")


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)  # stable: the rest keep their order
