"""Installs estimator_scale, its command line and its example model zoo.

pyproject.toml holds the metadata (name, version, requirements, commands);
this file the package list and the extras. Requirements are version ranges,
what any environment that runs the framework satisfies; constraints.txt pins
the exact versions the project installs and tests (tools/rig/setup_env.sh
installs with `-c constraints.txt`), and
tests/integration/test_wheel_install.py checks that those pins satisfy these
ranges.

TensorFlow itself is no requirement: `tensorflow` (GPU) and `tensorflow-cpu`
both provide it, and a requirement can name only one of them, so a user with
the other would get two. Bring TensorFlow 2.15, or name the extra `cpu` or
`gpu`; the package checks on first use that TensorFlow 2.15 is importable
and otherwise says in one line what to install (estimator_scale/stack.py).
"""
import setuptools

TENSORFLOW = ">=2.15.1,<2.16"
"""The last TensorFlow with tf.estimator (docs/getting-started.md#the-stack)."""

setuptools.setup(
    # The dynamic tables' kernel, compiled where it is first imported, is a
    # folder of data: named as a package so that setuptools ships it quietly.
    packages=setuptools.find_packages(
        include=["estimator_scale", "estimator_scale.*", "model_zoo",
                 "model_zoo.*"]) + ["estimator_scale.embeddings.kernels"],
    package_data={"estimator_scale.embeddings.kernels": ["*.cc"]},
    extras_require={
        # tensorflow-cpu has wheels for Linux on x86-64 only; elsewhere the
        # plain package is the CPU build.
        "cpu": [f"tensorflow-cpu{TENSORFLOW}; sys_platform == 'linux' and "
                "platform_machine == 'x86_64'",
                f"tensorflow{TENSORFLOW}; sys_platform != 'linux' or "
                "platform_machine != 'x86_64'"],
        "gpu": [f"tensorflow[and-cuda]{TENSORFLOW}"],
        # Built from source, published as source only: set the variables
        # of docs/getting-started.md (Gloo, TensorFlow) when installing.
        "horovod": ["horovod>=0.28.1,<0.29"],
        "plots": ["matplotlib>=3.5"],
        # python -m tools.datasets (the census data is a parquet file) and
        # estimator-scale-parquet; releases before 18 are built on numpy < 2.
        "datasets": ["pyarrow>=14,<18"],
        # s3:// and hdfs:// paths: TensorFlow 2.15 has no file system for
        # them; this release line of tensorflow-io is the one built for it.
        "s3": ["tensorflow-io>=0.36,<0.37"],
        # What the tests start besides the package: pytest (and its runner
        # over several cores) and an S3-compatible server.
        "test": ["pytest>=7", "pytest-xdist>=3", "moto[s3]>=5,<6",
                 "flask>=3", "flask-cors>=4", "pyyaml>=6"],
        # make bench-dynamic's peer: the TFRA release built for TF 2.15.1
        # (its own requirements are met by the pinned stack: install it
        # with pip's --no-deps).
        "bench": ["tensorflow-recommenders-addons==0.7.2"],
    },
)
