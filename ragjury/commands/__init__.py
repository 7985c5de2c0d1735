"""What each CLI command does, once its arguments are parsed into settings."""
