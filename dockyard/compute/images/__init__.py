"""Container images on a host: pulled by digest, checked blob by blob, unpacked as
hostile input into a content-addressed, read-only cache (`cache`, `layers`). Nothing
runs a job here; the sandbox mounts what the cache hands out."""
