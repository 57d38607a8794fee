"""What the host tells its operator about itself (docs/spec/host-features.md#hf-observability): structured host logs that
name the instance (``logs``), Prometheus metrics (``metrics``) and optional OpenTelemetry traces
(``tracing``). Each is cheap when off and never reaches tenant code (the sandbox child imports none
of them)."""
