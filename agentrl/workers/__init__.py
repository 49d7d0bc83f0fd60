"""Stand-ins for roles that do not run as one local object: Ray proxies (`ray_proxies`, the
driver's view of roles living in Ray actors) and the rollout split over torchrun ranks
(`sharded`). Each satisfies the trainer's role Protocols (`agentrl.trainer.components`), so the
loop cannot tell them from the local roles. Which one a run gets is decided in
`agentrl.assembly`, which builds them; nothing here reads the config's choices.
"""
