"""Configuration: the option schema and its resolution, app settings, Redis URLs."""
