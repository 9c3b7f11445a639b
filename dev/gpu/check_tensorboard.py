#!/usr/bin/env python3
"""Reads vlm.cpp's TensorBoard event files with TensorBoard's own loader (the event multiplexer and data provider
that `tensorboard --logdir` serves from) and checks that every kind we write arrives: scalars, images, text and
hparams sessions (histograms are reported when present). Run on a machine with the `tensorboard` package, e.g.

  dev/gpu/check_tensorboard.py runs/shapes-tiny          # one run directory (its tb/ folder holds the files)
  dev/gpu/check_tensorboard.py runs                      # or the folder above several runs

Prints, per run and plugin, the tags with their number of points, a few values read back (the last train loss, an
image's PNG header and size, the start of a text, the number of hparams and the session's end status), and exits 1
when any of scalars, images, text or hparams is missing, 2 when tensorboard is not installed.
"""
import sys

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2 if len(sys.argv) != 2 else 0
    logdir = sys.argv[1]
    try:
        import tensorboard
        from tensorboard import context
        from tensorboard.backend.event_processing import data_provider
        from tensorboard.backend.event_processing import plugin_event_multiplexer
        from tensorboard.plugins.hparams import metadata as hparams_metadata, plugin_data_pb2
    except ImportError as e:
        print(f"tensorboard is not installed here ({e})")
        return 2
    print(f"tensorboard {tensorboard.__version__}; logdir {logdir}")
    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(logdir)
    mux.Reload()
    provider = data_provider.MultiplexerDataProvider(mux, logdir)
    ctx = context.RequestContext()
    eid = ""
    runs = sorted(r.run_name for r in provider.list_runs(ctx, experiment_id=eid))
    print(f"runs: {runs}")
    if not runs:
        print("FAIL: no run with event files under", logdir)
        return 1

    found = {}
    scalars = provider.list_scalars(ctx, experiment_id=eid, plugin_name="scalars")
    found["scalars"] = scalars
    images = provider.list_blob_sequences(ctx, experiment_id=eid, plugin_name="images")
    found["images"] = images
    text = provider.list_tensors(ctx, experiment_id=eid, plugin_name="text")
    found["text"] = text
    histograms = provider.list_tensors(ctx, experiment_id=eid, plugin_name="histograms")
    hparams = mux.PluginRunToTagToContent(hparams_metadata.PLUGIN_NAME)
    found["hparams"] = hparams

    for plugin, by_run in list(found.items()) + [("histograms", histograms)]:
        for run in sorted(by_run):
            for tag in sorted(by_run[run]):
                series = by_run[run][tag]
                points = getattr(series, "max_step", None)
                print(f"  {plugin:10s} {run:30s} {tag}" + (f"  (last step {points})" if points is not None else ""))

    for run, tags in scalars.items():
        for tag in ("train/loss", "train/tflops", "train/mfu"):
            if tag in tags:
                data = provider.read_scalars(ctx, experiment_id=eid, plugin_name="scalars", downsample=10000,
                                             run_tag_filter=_filter(run, tag))
                points = data[run][tag]
                print(f"{run}: {tag} has {len(points)} points, last {points[-1].value:.6g} at step {points[-1].step}")
    for run, tags in images.items():
        tag = sorted(tags)[0]
        seqs = provider.read_blob_sequences(ctx, experiment_id=eid, plugin_name="images", downsample=10,
                                            run_tag_filter=_filter(run, tag))
        datum = seqs[run][tag][-1]
        blobs = [provider.read_blob(ctx, blob_key=b.blob_key) for b in datum.values]
        png = blobs[2][:8] == PNG_SIGNATURE
        print(f"{run}: image {tag} step {datum.step}: {blobs[0].decode()} x {blobs[1].decode()} px, "
              f"{len(blobs[2])} bytes, PNG signature {png}; description {tags[tag].description[:80]!r}")
    for run, tags in text.items():
        for tag in sorted(tags):
            data = provider.read_tensors(ctx, experiment_id=eid, plugin_name="text", downsample=10,
                                         run_tag_filter=_filter(run, tag))
            value = data[run][tag][-1].numpy
            s = value.item() if value.shape == () else value.flatten()[0]
            s = s.decode("utf-8", "replace") if isinstance(s, bytes) else str(s)
            print(f"{run}: text {tag}: {len(s)} characters: {s[:70]!r}")
    for run, tags in hparams.items():
        for tag, content in tags.items():
            data = plugin_data_pb2.HParamsPluginData.FromString(content)
            kind = data.WhichOneof("data")
            if kind == "session_start_info":
                info = data.session_start_info
                lr = info.hparams.get("train.lr")
                print(f"{run}: hparams session start: {len(info.hparams)} hparams"
                      + (f", train.lr = {lr.number_value:.6g}" if lr is not None else ""))
            elif kind == "session_end_info":
                print(f"{run}: hparams session end: status {data.session_end_info.status}")

    missing = [k for k, v in found.items() if not any(v.values())]
    if missing:
        print("FAIL: nothing found for", ", ".join(missing))
        return 1
    print("OK: scalars, images, text and hparams all read by TensorBoard"
          + (", and histograms" if any(histograms.values()) else ""))
    return 0


def _filter(run, tag):
    from tensorboard.data import provider as p
    return p.RunTagFilter(runs=[run], tags=[tag])


if __name__ == "__main__":
    sys.exit(main())
