"""The measurement wing: recorded traces, the synthetic workload, the cache simulator,
calibration and the bench. It reads the runtime (pilot, passes, lifecycle, ...) and the
runtime never imports it, so an agent that only uses TokenPilot loads none of this."""
