"""Game envs: Gymnasium envs played through an `act` tool (see `adapter.GymTextEnv`)."""

from ..registration import register

register(
    "games/frozenlake-v0",
    "agentrl.envs.games.frozenlake:FrozenLakeTextEnv",
    description="FrozenLake 4x4 (not slippery) as a text grid; BFS oracle",
)
register(
    "games/frozenlake-8x8-v0",
    "agentrl.envs.games.frozenlake:FrozenLakeTextEnv",
    description="FrozenLake 8x8 (not slippery) as a text grid; BFS oracle",
    size=8,
)
register(
    "games/frozenlake-random-v0",
    "agentrl.envs.games.frozenlake:FrozenLakeTextEnv",
    description="FrozenLake on a new seeded 6x6 map each episode; BFS oracle",
    size=6,
    random_map=True,
)
register(
    "games/guess-number-v0",
    "agentrl.envs.games.guess:GuessNumberTextEnv",
    description="Find a number in 1..100 from higher/lower hints; binary-search oracle",
)
register(
    "games/wordle-v0",
    "agentrl.envs.games.wordle:WordleTextEnv",
    description="Wordle-style five-letter word game with G/Y/_ feedback",
)
register(
    "games/gym-v0",
    "agentrl.envs.games.adapter:GymTextEnv",
    description="Any Gymnasium env by id via its ANSI render: make('games/gym-v0', env='...')",
)
