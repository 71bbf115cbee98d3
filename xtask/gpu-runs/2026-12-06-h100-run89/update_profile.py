"""HostOffloadedCache's update under cProfile: the offload benchmark's
model, ``generate`` of 32 tokens after a 4,096-token prompt, profiled
after a warm-up; the functions of hostcopy's cache and the torch calls
they make, by own time and by time inside, per decoded token."""
import cProfile
import pstats
import sys

import torch
import transformers

sys.path.insert(0, "driver/python/bench")
import hostcopy.offload.transformers  # noqa: E402
from offload_loop import config  # noqa: E402

NEW = 32


def main():
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config()).to(torch.bfloat16).eval()
    prompt = torch.randint(0, 1024, (1, 4096), device="cuda")

    def run():
        cache = hostcopy.offload.transformers.HostOffloadedCache(config=model.config)
        model.generate(prompt, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, past_key_values=cache)
        torch.cuda.synchronize()

    run()
    run()
    profile = cProfile.Profile()
    profile.enable()
    run()
    profile.disable()
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(45)
    stats.sort_stats("cumulative").print_stats("hostcopy", 40)
    for name in ("update", "_fetch", "_take", "append", "_release", "_ahead"):
        stats.print_callees(rf"transformers.py:\d+\({name}\)")


if __name__ == "__main__":
    main()
