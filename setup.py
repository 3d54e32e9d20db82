"""Installs estimator_scale and its example model zoo."""
import setuptools

setuptools.setup(
    name="estimator_scale",
    version="0.1.0",
    description="Scale TensorFlow Estimator training: sharding, accumulation, "
    "large-batch lr scaling and AdaScale over tf.distribute and Horovod.",
    packages=setuptools.find_packages(include=["estimator_scale", "estimator_scale.*",
                                               "model_zoo", "model_zoo.*"]),
    python_requires=">=3.9,<3.12",
    install_requires=[
        "tensorflow-cpu==2.15.1; platform_machine=='x86_64'",
        "tensorflow-estimator==2.15.0",
        "numpy<2",
        "absl-py>=2",
        "scikit-learn",
    ],
    extras_require={
        "horovod": ["horovod==0.28.1"],
        "plots": ["matplotlib"],
        # s3:// and hdfs:// paths: TensorFlow 2.15 has no file system for
        # them; this release of tensorflow-io is the one built for it.
        "s3": ["tensorflow-io==0.36.0"],
    },
    entry_points={"console_scripts": [
        "estimator-scale=estimator_scale.train:run",
        "estimator-scale-launch=estimator_scale.launch:run",
    ]},
)
