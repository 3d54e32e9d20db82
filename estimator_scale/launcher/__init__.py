"""estimator-scale-launch: TF_CONFIG clusters here or on hosts over ssh."""
