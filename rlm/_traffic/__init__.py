"""Traffic: every LLM request passes the gate (budget → limiter → pacer → provider → retry)."""
