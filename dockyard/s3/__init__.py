"""The embedded S3 service: rclone's S3 gateway, its identity, dockyard's front door."""
