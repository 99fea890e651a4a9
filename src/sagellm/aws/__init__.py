"""The AWS control plane: the pinned CDK CLI (deploy/destroy), the local AWS (moto + extensions), cleanup."""
