"""Placeholder expansion, the trajectory's image records, and batch stacking."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from PIL import Image

from agentrl.chat import ChatFormat
from agentrl.multimodal import check_alignment, decode_pixel_values, image_entries
from agentrl.multimodal.rollout import EpisodeImages
from agentrl.trainer.multimodal import stack_multimodal
from agentrl.types import Message, Trajectory


def _img(w: int, h: int, color: tuple[int, int, int] = (200, 30, 30)) -> Image.Image:
    return Image.new("RGB", (w, h), color)


def test_expand_counts_match_grid(vlm: tuple[Any, Any, Any]) -> None:
    _, tok, vp = vlm
    chat = ChatFormat(tok, vision=vp)
    msgs = [Message("user", "two images", images=[_img(56, 56), _img(112, 56)])]
    ids = chat.prompt_ids(msgs, None)
    assert ids.count(vp.image_token_id) == 2  # the template renders one pad per image
    inputs = [vp.process(i) for i in msgs[0].images]
    out, offsets = vp.expand(ids, inputs)
    for inp, off in zip(inputs, offsets, strict=True):
        t, h, w = inp.grid_thw
        assert inp.num_tokens == t * h * w // vp.merge_size**2
        assert inp.pixel_values.shape[0] == t * h * w
        assert out[off : off + inp.num_tokens] == [vp.image_token_id] * inp.num_tokens
    assert out.count(vp.image_token_id) == sum(i.num_tokens for i in inputs)
    with pytest.raises(ValueError, match="placeholders"):
        vp.expand(ids, inputs[:1])


def test_records_round_trip_bit_exact(vlm: tuple[Any, Any, Any]) -> None:
    _, tok, vp = vlm
    chat = ChatFormat(tok, vision=vp)
    traj = Trajectory(prompt_ids=[])
    images = EpisodeImages(vp, traj)
    msgs = [Message("user", "look", images=[_img(70, 50)])]
    ids, pending = images.expand(msgs, chat.prompt_ids(msgs, None), 0)
    traj.prompt_ids = ids
    images.commit(pending)
    back = Trajectory.from_json(traj.to_json())
    assert back.to_json() == traj.to_json()
    (entry,) = image_entries(back.multimodal)
    assert torch.equal(decode_pixel_values(entry), images.inputs[0].pixel_values)
    assert entry["png"]  # the viewer's copy
    check_alignment(back.input_ids, back.multimodal)
    broken = list(back.input_ids)
    broken[entry["offset"]] = 0
    with pytest.raises(ValueError, match="not image tokens"):
        check_alignment(broken, back.multimodal)


def test_no_processor_is_a_clear_error() -> None:
    images = EpisodeImages(None, Trajectory(prompt_ids=[]))
    assert images.expand([Message("user", "text only")], [1, 2], 0) == ([1, 2], None)
    with pytest.raises(ValueError, match="enable_vision"):
        images.expand([Message("user", "x", images=[_img(8, 8)])], [1, 2], 0)


def test_stack_multimodal_row_order(vlm: tuple[Any, Any, Any]) -> None:
    _, tok, vp = vlm
    chat = ChatFormat(tok, vision=vp)
    rows, trajs = [], []
    for colors in ([(255, 0, 0)], [], [(0, 255, 0), (0, 0, 255)]):
        traj = Trajectory(prompt_ids=[])
        images = EpisodeImages(vp, traj)
        msgs = [Message("user", "q", images=[_img(56, 56, c) for c in colors])]
        traj.prompt_ids, pending = images.expand(msgs, chat.prompt_ids(msgs, None), 0)
        images.commit(pending)
        trajs.append(traj)
        rows.append(images.inputs)
    width = max(len(t.prompt_ids) for t in trajs)
    input_ids = torch.zeros((3, width), dtype=torch.long)
    for i, t in enumerate(trajs):
        input_ids[i, : len(t.prompt_ids)] = torch.tensor(t.prompt_ids)
    out = stack_multimodal([t.multimodal for t in trajs], "cpu", input_ids)
    expected = torch.cat([i.pixel_values for r in rows for i in r])
    assert torch.equal(out["pixel_values"], expected)
    assert out["image_grid_thw"].tolist() == [list(i.grid_thw) for r in rows for i in r]
    assert torch.equal(out["mm_token_type_ids"].bool(), input_ids == vp.image_token_id)
    assert stack_multimodal([{}, {}], "cpu") == {}


def test_image_features_independent_of_batch(vlm: tuple[Any, Any, Any]) -> None:
    """Each image's features are the same whichever other images share the vision call. The
    engine's session reuse encodes only a turn's new images and the trainer every image of a
    micro-batch at once, so per-image windows (Qwen2.5-VL), position-grid interpolation and
    deepstack features (Qwen3-VL) must stay within their own image."""
    model, _, vp = vlm
    sizes = [(448, 448, (9, 9, 9)), (112, 56, (200, 0, 0)), (90, 160, (0, 90, 200))]
    inputs = [vp.process(_img(w, h, c)) for w, h, c in sizes]
    grid = torch.tensor([i.grid_thw for i in inputs])

    def features(sel: slice) -> list[list[torch.Tensor]]:
        """Per image: its merged features, then its deepstack features (Qwen3-VL) per layer."""
        pv = torch.cat([i.pixel_values for i in inputs[sel]])
        out = model.get_image_features(pv, grid[sel])
        deep = getattr(out, "deepstack_features", None) or []
        feats = getattr(out, "pooler_output", out)
        return [[f, *(layer[k] for layer in deep)] for k, f in enumerate(feats)]

    with torch.no_grad():
        together = features(slice(None))
        apart = features(slice(0, 1)) + features(slice(1, None))
    assert len(together) == len(apart) == len(inputs)
    for img, (a, b) in enumerate(zip(together, apart, strict=True)):
        assert len(a) == len(b) and a[0].shape[0] == inputs[img].num_tokens
        for x, y in zip(a, b, strict=True):
            assert torch.allclose(x, y, atol=1e-6), (img, float((x - y).abs().max()))


def test_qwen2_5_vl_preset_uses_window_attention() -> None:
    """The tiny Qwen2.5-VL must keep exercising windowed attention: several windows per image
    and at least one windowed (not full-attention) block."""
    from agentrl.models.tiny_vlm import build_tokenizer, image_processor, model_config

    vision = model_config("qwen2_5_vl", build_tokenizer()).vision_config
    out = image_processor("qwen2_5_vl")(images=[_img(448, 448)], return_tensors="pt")
    _, h, w = (int(x) for x in out["image_grid_thw"][0])
    window = vision.window_size // vision.spatial_merge_size // vision.patch_size
    merge = vision.spatial_merge_size
    assert window >= 1 and (h // merge) * (w // merge) > window * window
    assert set(range(vision.depth)) - set(vision.fullatt_block_indexes)
