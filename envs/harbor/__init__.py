"""Harbor task folders as agentrl envs, reached by the `harbor:` id prefix
(`agentrl.envs.interop`): `harbor:path/to/task`, `harbor:path/to/dataset`, `harbor:bundled`.

Nothing registers here: a task folder is named by its path, so the prefix resolves it.
`data/` holds five small offline tasks with oracle solutions (`harbor:bundled/NAME`);
`family.py` generates a family of them, split train/held-out (`harbor:family/files-v0`).
"""
