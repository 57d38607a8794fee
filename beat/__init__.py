"""The custom Celery beat scheduler: cron matches, durable timers and sweeps."""
