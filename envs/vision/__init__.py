"""Vision envs: procedurally generated, pillow-rendered images (nothing is downloaded).

Observations carry PIL images in `Message.images`; a vision-language policy
(`model.enable_vision=true`) sees them through its processor (see docs/vision.md).
"""

from ..registration import register

register(
    "vision/count-shapes-v0",
    "agentrl.envs.vision.shapes:CountShapesEnv",
    description="Count (kinds of) shapes in a rendered image; single turn, VLM",
)
register(
    "vision/bar-chart-v0",
    "agentrl.envs.vision.chart:BarChartEnv",
    description="Read a bar's value from a rendered bar chart; single turn, VLM",
)
register(
    "vision/zoom-v0",
    "agentrl.envs.vision.zoom:ZoomEnv",
    description="Read a tiny code by calling a zoom tool that returns images; multi-turn, VLM",
)
