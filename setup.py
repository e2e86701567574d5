from setuptools import find_packages, setup

setup(
    name="neuroshard",
    version="0.1.0",
    description="Pre-train and search: embedding table sharding with pre-trained neural cost models",
    packages=find_packages(include=["neuroshard", "neuroshard.*"]),
    python_requires=">=3.10",
    # torch is left unpinned here on purpose: GPU users bring their own CUDA
    # build; the Makefile pins the CPU build for this machine.
    install_requires=["torch", "numpy", "tqdm", "matplotlib"],
    # torchrec: `--alg torchrec` and the TorchRec plan export (on CPU, see requirements-torchrec.txt)
    extras_require={"cpu": ["fbgemm-gpu-cpu"], "gpu": ["fbgemm-gpu"], "torchrec": ["torchrec"], "test": ["pytest"]},
)
