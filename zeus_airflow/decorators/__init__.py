"""TaskFlow decorators (``@task.zeus``), registered through the provider info."""
