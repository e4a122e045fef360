"""The `dockyard` command: operators' tools and people's tools, over boto3 or the database."""
