"""The cloud boundary: one protocol, the EC2 backend."""
