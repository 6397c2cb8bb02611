"""The agentic rollout engine: env managers, the group queue, the driver's scheduler, batches."""
