"""Remote OpenAI-compatible engines: endpoints, their keys, a streaming client that answers
with the same `Reply` as the local engine, and pools of endpoints serving one model.

Qt-free, and beside the engine in the layers: it builds on `deskllm.engine`'s Reply, events
and errors, and knows nothing of the store or the planner (the store keeps the endpoint
registry; the faces hand endpoints and keys in).
"""
