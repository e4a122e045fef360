"""The wire: JSON 1.1 over HTTP, SigV4, and botocore-model validation and serialisation."""
