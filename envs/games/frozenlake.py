"""`games/frozenlake-v0`: Gymnasium's FrozenLake as a chat game, with a shortest-path oracle.

* Observation: the map as a grid (`S` start, `F` ice, `H` hole, `G` goal, `P` you).
* Tools: `act(action)`: 0/left, 1/down, 2/right, 3/up (or `<action>right</action>`).
* Reward: 1.0 on reaching the goal, else 0.0 (FrozenLake's own reward).
* Termination: goal or hole ends the episode; `max_turns` truncates.
* Difficulty: `size` (map side), `p_frozen` (chance a tile is ice), `random_map` (a new
  seeded map every reset instead of Gymnasium's fixed 4x4/8x8 one), `is_slippery`.
* Oracle: breadth-first search from the current tile to the goal (only when not slippery).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import gymnasium as gym
from gymnasium.envs.toy_text.frozen_lake import generate_random_map

from ..core import Observation
from .adapter import GymTextEnv

_MOVES = {0: (0, -1), 1: (1, 0), 2: (0, 1), 3: (-1, 0)}


class FrozenLakeTextEnv(GymTextEnv):
    description = "FrozenLake: walk from S to G without falling into a hole; BFS oracle."

    def __init__(
        self,
        size: int = 4,
        p_frozen: float = 0.8,
        random_map: bool = False,
        is_slippery: bool = False,
        max_turns: int | None = None,
    ) -> None:
        self.size, self.p_frozen, self.random_map = size, p_frozen, random_map
        self.is_slippery = is_slippery
        super().__init__(
            self._make(None),
            action_names=["left", "down", "right", "up"],
            instructions="Walk on the ice (F) from S to the goal G without stepping into a hole (H). P is you.",
            max_turns=max_turns or 4 * size * size,
        )

    def _make(self, seed: int | None) -> gym.Env:
        if self.random_map:
            desc = generate_random_map(self.size, self.p_frozen, seed=seed)
            return gym.make("FrozenLake-v1", desc=desc, is_slippery=self.is_slippery)
        name = {4: "4x4", 8: "8x8"}.get(self.size)
        if name is None:
            raise ValueError("fixed maps are 4x4 or 8x8; pass random_map=True for other sizes")
        return gym.make("FrozenLake-v1", map_name=name, is_slippery=self.is_slippery)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        if self.random_map:
            self.env.close()
            self.env = self._make(seed)
        return super().reset(seed=seed, options=options)

    @property
    def grid(self) -> list[str]:
        return [b"".join(row).decode() for row in self.env.unwrapped.desc]  # type: ignore[attr-defined]

    def describe(self, obs: Any) -> str:
        rows = [list(r) for r in self.grid]
        r, c = divmod(int(obs), len(rows[0]))
        rows[r][c] = "P"
        return "\n".join("".join(row) for row in rows)

    def oracle_move(self) -> int | None:
        if self.is_slippery:
            return None
        grid, n = self.grid, len(self.grid[0])
        start = divmod(int(self.last_obs), n)
        first: dict[tuple[int, int], int | None] = {start: None}
        queue = deque([start])
        while queue:
            r, c = queue.popleft()
            if grid[r][c] == "G":
                return first[(r, c)]
            for move, (dr, dc) in _MOVES.items():
                nxt = (r + dr, c + dc)
                if 0 <= nxt[0] < len(grid) and 0 <= nxt[1] < n and nxt not in first:
                    if grid[nxt[0]][nxt[1]] != "H":
                        first[nxt] = move if first[(r, c)] is None else first[(r, c)]
                        queue.append(nxt)
        return None
