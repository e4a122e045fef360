"""The web console (`/console`): pages for people, over the same operations as the API."""
