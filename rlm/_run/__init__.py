"""The run: runtime wiring, the call loop, the bridge, feedback to the model, parsing, context."""
