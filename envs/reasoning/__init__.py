"""reasoning-gym datasets as agentrl envs: `rg/<dataset>-v0`, and `rg/any-v0` for any name.

Five datasets are registered by name; `make("rg/any-v0", dataset="countdown", config={...})`
reaches the rest. reasoning-gym is imported only when an env is built.
"""

from ..registration import register

_DATASETS = {
    "basic_arithmetic": "Arithmetic expressions with mixed operators",
    "chain_sum": "Chains of additions and subtractions",
    "leg_counting": "Count the legs of a list of animals",
    "spell_backward": "Spell a word backward",
    "word_sorting": "Sort words by ASCII/Unicode order",
}

for _name, _desc in _DATASETS.items():
    register(
        f"rg/{_name}-v0",
        "agentrl.envs.reasoning.rg:ReasoningGymEnv",
        family="reasoning",
        description=f"reasoning-gym {_name}: {_desc}",
        dataset=_name,
    )
register(
    "rg/any-v0",
    "agentrl.envs.reasoning.rg:ReasoningGymEnv",
    family="reasoning",
    description="Any reasoning-gym dataset: make('rg/any-v0', dataset=..., config={...})",
)
