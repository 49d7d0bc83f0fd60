"""reasoning-gym datasets as agentrl envs: `rg/<dataset>-v0`, and `rg/any-v0` for any name.

Five datasets are registered by name; `make("rg/any-v0", dataset="countdown", config={...})`
reaches the rest. reasoning-gym is imported only when an env is built.

The registered ids score binary (`binary=True`: 1.0 only for a full upstream score): each of
their verifiers pays partial credit for answers that do not solve the task. basic_arithmetic
and leg_counting (reasoning-gym's default `score_answer`) and chain_sum
(`compute_decimal_reward`) give `len(gold) / len(answer)` to any answer containing the gold
(`420` for `42`: 0.67); spell_backward pays per matching letter position (the word unreversed
scores its palindromic positions); word_sorting gives >= 0.2 to any permutation of the words,
the question's own list included.
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
        binary=True,
    )
register(
    "rg/any-v0",
    "agentrl.envs.reasoning.rg:ReasoningGymEnv",
    family="reasoning",
    description="Any reasoning-gym dataset: make('rg/any-v0', dataset=..., config={...})",
)
