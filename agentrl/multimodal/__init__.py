"""Vision-language support: image processing, placeholder expansion, trajectory records.

- `processor`: `VisionProcessor` turns a PIL image into the model's pixel inputs and expands
  the chat template's single `<|image_pad|>` per image into exactly as many placeholder tokens
  as the vision tower will produce features (grid_thw.prod() / merge²).
- `record`: the JSON-safe per-image entries kept in `Trajectory.multimodal` (bit-exact pixel
  values, grid, placeholder offset) and the alignment check the trainer runs before a forward.
- `rollout`: `EpisodeImages`, the per-episode state the rollout uses to expand observations and
  to give the engine every image seen so far on each generate call.
"""

from .processor import ImageInputs, VisionProcessor, load_vision_processor
from .record import check_alignment, decode_pixel_values, image_entries

__all__ = [
    "ImageInputs",
    "VisionProcessor",
    "check_alignment",
    "decode_pixel_values",
    "image_entries",
    "load_vision_processor",
]
