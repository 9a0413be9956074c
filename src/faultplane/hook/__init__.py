"""The PreToolUse hook for coding agents: judge a tool call (a shell command, a file edit, an MCP call) before
the agent's harness runs it.

Kept light on purpose: the hook runs before every shell command an agent issues, so `faultplane.hook.entry`
imports only the shell parser and this package; the policy, the engine and the store load only when a command
really involves chaos. Nothing here is imported by `import faultplane`.
"""
