"""Python's ResNet-18 on the same JPEGs, for scripts/bench/resnet_gpu.sh (issue #49's GPU line):
torchvision's resnet18, bf16 autocast, SGD (momentum 0.9, weight decay 1e-4), batch --batch-size,
  --fed resident: --resident images decoded once (the same transform) and held on the card;
  --fed dataloader: DataLoader(ImageFolder, RandomResizedCrop + flip + normalize, num_workers =
                    --workers, pinned, persistent workers), the way the seeds' scripts feed a GPU.
Prints one JSON line: steady images/s over the steps after --warmup. Not a test.
usage: python3 scripts/bench/resnet_peers.py --data DIR --fed resident|dataloader [--steps 200]
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_peers import train_transform  # noqa: E402  torchvision's ImageNet training transform


def batches(a, dev):
    import torch
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder
    ds = ImageFolder(os.path.join(a.data, "train"), transform=train_transform(a.image_size))
    if a.fed == "resident":
        n = min(a.resident, len(ds))
        x = torch.stack([ds[i][0] for i in range(n)]).to(dev)
        y = torch.tensor([ds[i][1] for i in range(n)], device=dev)
        g = torch.Generator(device=dev).manual_seed(a.seed)
        while True:
            idx = torch.randint(0, n, (a.batch_size,), device=dev, generator=g)
            yield x[idx], y[idx]
    loader = DataLoader(ds, batch_size=a.batch_size, shuffle=True, num_workers=a.workers, pin_memory=True,
                        persistent_workers=True, drop_last=True)
    while True:
        for xb, yb in loader:
            yield xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="a folder written by image_peers.py --make (train/)")
    p.add_argument("--fed", choices=["resident", "dataloader"], required=True)
    p.add_argument("--workers", type=int, default=os.cpu_count())
    p.add_argument("--resident", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    import torch
    import torchvision
    torch.manual_seed(a.seed)
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    classes = len(os.listdir(os.path.join(a.data, "train")))
    model = torchvision.models.resnet18(num_classes=classes).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * a.batch_size / 256, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    it = batches(a, dev)
    t0 = None
    for step in range(a.steps):
        if step == a.warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        x, y = next(it)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    rate = (a.steps - a.warmup) * a.batch_size / (time.perf_counter() - t0)
    print(json.dumps({"impl": "python", "fed": a.fed, "workers": a.workers if a.fed == "dataloader" else 0,
                      "batch_size": a.batch_size, "steps": a.steps - a.warmup, "images_per_sec": round(rate, 1),
                      "loss": float(loss), "device": torch.cuda.get_device_name()}, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
