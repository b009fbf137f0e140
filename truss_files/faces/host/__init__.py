"""Hosts: the agent programs people run (Claude Code, Claude Desktop, any MCP client), and
what truss-files does for them without a tool call.

    setup.py       write (or print, or remove) a host's MCP server entry and hooks
    hookrun.py     the host hooks: session-start (the context a session starts from),
                   pre-compact / session-end (learn from the transcript), stop (note it)
    transcript.py  a host's transcript as the messages a model may learn from
    learn.py       ask a model for what a run established; write it through the facade
    state.py       what the hooks leave behind: the log and each hook's last run
    doctor.py      check the install, the store, keys and roles, host configs, hooks

A face like the others: it reads and writes memory through ``MemoryStore`` alone.
"""
