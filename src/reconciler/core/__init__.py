"""The loop core: hints in, one pass, one lifecycle trigger out.

`mailbox` (where event sources post hints), `sense` and `steps` (a hint's
facts, and the pure step planner that decides its input trigger and pass),
`passes` (one pass over the actuators), `conclude` (the pure outcome side),
`loop` (the one consumer task that ties them together) and `status` (what
`/state` shows of it, as frozen values).
"""
