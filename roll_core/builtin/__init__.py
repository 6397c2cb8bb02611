"""roll-core's own plugins, registered through the same hooks as external ones."""
