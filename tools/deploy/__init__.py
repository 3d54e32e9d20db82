"""Deploying the framework on clusters: the container image (Dockerfile),
the Kubeflow manifests (manifests/), and k8s_schema, which checks those
manifests against the operators' schemas without a cluster."""
