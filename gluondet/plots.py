"""Pictures of training runs and evaluations, drawn with matplotlib's Agg backend.

- `draw_curves`: each loss, the learning rate and a validation metric against the epoch,
  from ``{save_prefix}_metrics.jsonl`` (`MetricsLog`); one line per run. Training writes
  ``{save_prefix}_curves.png`` (`gluondet.engine.curves.CurvesHook`), ``gluondet plot``
  overlays runs (`plot_runs`).
- `evaluation_plots`: ``pr_curves.png``, ``confusion_matrix.png`` and ``ap_per_class.png``
  of ``gluondet evaluate --plots`` from the evaluation's own metric objects.

matplotlib is imported when a picture is drawn (it is optional); figures are made
without pyplot, so drawing neither needs a display nor touches pyplot's state. Every
picture is written to a temporary file and renamed. Each draw function returns what it
drew, so a test can compare it with the metric's numbers.
"""
import json
import math
import os

import numpy as np

from .files import atomic_save
from .optional import require

__all__ = ['MetricsLog', 'Curves', 'require_matplotlib', 'draw_curves', 'plot_runs',
           'draw_pr_curves', 'draw_ap_bars', 'draw_confusion', 'evaluation_plots',
           'EVALUATION_FILES']

DPI = 100
EVALUATION_FILES = ('pr_curves.png', 'confusion_matrix.png', 'ap_per_class.png')
_MAX_ANNOTATED = 30     # confusion matrices up to this side get their counts written


def require_matplotlib():
    """Import matplotlib, or raise an ImportError that says how to install it."""
    return require('matplotlib', 'drawing')


def _figure(width, height):
    """An Agg figure of ``width x height`` inches (no pyplot)."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    figure = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    atomic_save(lambda tmp: figure.savefig(tmp, format='png', dpi=DPI), path)


# ---------------------------------------------------------------- training curves

class Curves:
    """A run's curves against the epoch (``iteration / iterations per epoch``).

    Attributes
    ----------
    epoch : numpy.ndarray
        Where each training record's interval ends.
    losses : dict
        ``{name: values}``, the interval means (NaN where not finite or absent).
    lr : numpy.ndarray
    val_epoch : numpy.ndarray
        Where each validation ran.
    metrics : dict
        ``{name: values}`` of the validations.
    """

    def __init__(self, epoch, losses, lr, val_epoch, metrics):
        self.epoch, self.losses, self.lr = epoch, losses, lr
        self.val_epoch, self.metrics = val_epoch, metrics


class MetricsLog:
    """The records of a ``_metrics.jsonl`` (format: `gluondet.engine.logging`), read
    incrementally: each `read` parses only the lines added since the last.

    Parameters
    ----------
    path : str
    """

    def __init__(self, path):
        self.path = path
        self.train, self.val = [], []
        self._offset = self._lines = 0

    def read(self):
        """Add the complete lines written since the last read (all of them again if the
        file was cut, as a resumed run does); returns self.

        Raises OSError for a missing file, ValueError naming the line of a bad record.
        """
        if os.path.getsize(self.path) < self._offset:
            self.train, self.val = [], []
            self._offset = self._lines = 0
        with open(self.path, 'rb') as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b'\n') + 1     # a last line without its newline is still being written
        for line in data[:end].split(b'\n')[:-1]:
            self._lines += 1
            if line.strip():
                self._add(line)
        self._offset += end
        return self

    def _add(self, line):
        try:
            record = json.loads(line)
            kind = record['type']
            if kind == 'train':
                self.train.append((int(record['iteration']), int(record['epoch']),
                                   int(record['batch']), _number(record['lr']),
                                   {k: _number(v) for k, v in record['losses'].items()}))
            elif kind == 'val':
                self.val.append((int(record['iteration']), int(record['epoch']),
                                 {k: _number(v) for k, v in record['metrics'].items()}))
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError('%s, line %d: not a metrics record (%s: %s)' % (
                self.path, self._lines, type(err).__name__, err)) from None

    def iters_per_epoch(self):
        """Iterations per epoch, from a record after the first epoch (``iteration = epoch *
        iters + batch + 1``), else the longest first epoch seen."""
        for iteration, epoch, batch, _, _ in self.train:
            if epoch > 0 and iteration > batch + 1:
                return (iteration - batch - 1) / epoch
        seen = [b + 1 for _, e, b, _, _ in self.train if e == 0]
        seen += [it for it, e, _ in self.val if e == 0]
        return max(seen, default=1)

    def curves(self, iters_per_epoch=None):
        """The `Curves` of the records read (``iters_per_epoch`` default: estimated)."""
        per_epoch = float(iters_per_epoch or self.iters_per_epoch())
        names = _names(r[4] for r in self.train)
        metric_names = _names(r[2] for r in self.val)
        return Curves(
            np.array([r[0] for r in self.train], np.float64) / per_epoch,
            {n: np.array([r[4].get(n, math.nan) for r in self.train]) for n in names},
            np.array([r[3] for r in self.train], np.float64),
            np.array([r[0] for r in self.val], np.float64) / per_epoch,
            {n: np.array([r[2].get(n, math.nan) for r in self.val]) for n in metric_names})


def _number(value):
    return math.nan if value is None else float(value)


def _names(dicts):
    """Keys in order of first appearance."""
    return list(dict.fromkeys(k for d in dicts for k in d))


def draw_curves(runs, path, metric='mAP', title=None):
    """Draw training curves: one panel per loss, the learning rate and ``metric``.

    Parameters
    ----------
    runs : list of (str, Curves)
        Label and curves of each run, one line each (a legend when several).
    path : str
        The PNG file.
    metric : str
        The validation metric drawn ('mAP'); a run without it draws its first metric.
    title : str, optional

    Returns
    -------
    dict
        ``{panel: {label: (x, y)}}``, what each panel drew.
    """
    losses = _names({n: 0 for n in c.losses} for _, c in runs)
    panels = losses + ['lr', metric]
    cols = 2 if len(panels) <= 4 else 3
    rows = -(-len(panels) // cols)
    figure = _figure(4.2 * cols, 3.0 * rows + 0.4)
    axes = figure.subplots(rows, cols, squeeze=False).ravel()
    drawn = {panel: {} for panel in panels}
    for label, curves in runs:
        for name in losses:
            if name in curves.losses:
                drawn[name][label] = (curves.epoch, curves.losses[name])
        drawn['lr'][label] = (curves.epoch, curves.lr)
        shown = metric if metric in curves.metrics else next(iter(curves.metrics), None)
        if shown is not None:
            drawn[metric][label] = (curves.val_epoch, curves.metrics[shown])
    colors = {label: 'C%d' % (k % 10) for k, (label, _) in enumerate(runs)}
    last = max([x.max() for lines in drawn.values() for x, _ in lines.values() if x.size],
               default=1.0)
    for ax, panel in zip(axes, panels):
        for label, (x, y) in drawn[panel].items():
            ax.plot(x, y, color=colors[label], label=label, linewidth=1.2,
                    marker='o' if panel == metric else None, markersize=3)
        ax.set_title({metric: 'validation ' + metric, 'lr': 'learning rate'}.get(panel, panel),
                     fontsize=10)
        ax.set_xlabel('epoch', fontsize=9)
        ax.set_xlim(0, last * 1.02)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
        values = np.concatenate([y for _, y in drawn[panel].values()] or [np.zeros(0)])
        values = values[np.isfinite(values)]
        if panel == 'lr' and values.size and values.min() > 0 and \
                values.max() > 20 * values.min():
            ax.set_yscale('log')
        if not values.size:
            ax.text(0.5, 0.5, 'no validation yet' if panel == metric else
                    'no training records yet', ha='center', va='center',
                    transform=ax.transAxes, color='gray')
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    if len(runs) > 1:
        axes[0].legend(fontsize=8)
    figure.suptitle(title or (runs[0][0] if len(runs) == 1 else '%d runs' % len(runs)),
                    fontsize=11)
    width, height = figure.get_size_inches()    # fixed margins: tight_layout draws twice
    figure.subplots_adjust(left=0.65 / width, right=1 - 0.2 / width, bottom=0.5 / height,
                           top=1 - 0.6 / height, wspace=0.28, hspace=0.5)
    _save(figure, path)
    return drawn


def metrics_path(run):
    """The metrics file of a run: ``RUN_metrics.jsonl``, or ``run`` itself if a ``.jsonl``."""
    return run if run.endswith('.jsonl') else run + '_metrics.jsonl'


def plot_runs(runs, output, metric='mAP'):
    """Overlay the curves of training runs (``gluondet plot``).

    Parameters
    ----------
    runs : list of str
        Save prefixes (or ``_metrics.jsonl`` paths); the legend names each by its base
        name (the whole prefix where base names repeat).
    output : str
        The PNG file.
    metric : str

    Returns
    -------
    dict
        What `draw_curves` drew.

    Raises
    ------
    ValueError
        A missing, empty or malformed metrics file (named).
    """
    require_matplotlib()
    paths = [metrics_path(run) for run in runs]
    labels = [os.path.basename(p)[:-len('_metrics.jsonl')] if p.endswith('_metrics.jsonl')
              else os.path.basename(p) for p in paths]
    labels = [label if labels.count(label) == 1 else run for label, run in zip(labels, runs)]
    loaded = []
    for run, path, label in zip(runs, paths, labels):
        if not os.path.isfile(path):
            raise ValueError('%s: no such metrics file (%s is not the save prefix of a '
                             'training run)' % (path, run))
        log = MetricsLog(path).read()
        if not log.train and not log.val:
            raise ValueError('%s: no training or validation records in it' % path)
        loaded.append((label, log.curves()))
    return draw_curves(loaded, output, metric)


# ---------------------------------------------------------------- evaluation

def _envelope(precision):
    """The best precision at each recall or beyond, which both VOC APs read."""
    return np.maximum.accumulate(np.nan_to_num(precision)[::-1])[::-1]


def _ap_text(ap):
    return 'n/a' if math.isnan(ap) else '%.3f' % ap


def draw_pr_curves(curves, classes, aps, path, title):
    """Every class's precision-recall curve, its AP in the legend.

    Parameters
    ----------
    curves : list of ClassCurve
        `VOCMApMetric.curves`; the precision drawn is the best at that recall or beyond.
    classes : list of str
    aps : list of float
        The APs printed (`VOCMApMetric.get`), one per class.
    path, title : str

    Returns
    -------
    dict
        ``{class: ap}`` as written in the legend.
    """
    columns = max(1, -(-len(classes) // 24))
    figure = _figure(6.0 + 2.3 * columns, 6.0)
    ax = figure.add_subplot(1, 1, 1)
    drawn = {}
    for k, (name, curve, ap) in enumerate(zip(classes, curves, aps)):
        drawn[name] = ap
        recall = np.concatenate(([0.], curve.recall))
        precision = _envelope(curve.precision)
        precision = np.concatenate((precision[:1] if precision.size else [0.], precision))
        label = '%s  AP %s' % (name, _ap_text(ap))
        if not curve.num_gt:
            recall = precision = np.zeros(0)
            label += ' (no ground truth)'
        ax.plot(recall, precision, drawstyle='steps-pre', color='C%d' % (k % 10),
                linestyle='-' if k < 10 else '--', linewidth=1.3, label=label)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel('recall')
    ax.set_ylabel('precision (best at this recall or beyond)')
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=10)
    ax.legend(loc='upper left', bbox_to_anchor=(1.01, 1.0), fontsize=8, ncol=columns,
              frameon=False)
    figure.tight_layout()
    _save(figure, path)
    return drawn


def draw_ap_bars(classes, aps, mean_ap, path, title):
    """A bar per class with its AP written beside it, and the mean as a line.

    Returns ``{class: ap}`` as drawn (NaN, written 'n/a': no ground truth).
    """
    figure = _figure(7.0, max(2.5, 0.28 * len(classes) + 1.3))
    ax = figure.add_subplot(1, 1, 1)
    y = np.arange(len(classes))
    values = np.nan_to_num(np.asarray(aps, np.float64))
    ax.barh(y, values, color=['C%d' % (k % 10) for k in range(len(classes))], height=0.7)
    for k, ap in enumerate(aps):
        ax.text(values[k] + 0.01, k, _ap_text(ap), va='center', fontsize=8)
    if not math.isnan(mean_ap):
        ax.axvline(mean_ap, color='black', linestyle='--', linewidth=1,
                   label='mAP %.3f' % mean_ap)
        ax.legend(loc='lower right', fontsize=8)
    ax.set_yticks(y)
    ax.set_yticklabels(classes, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.1)
    ax.set_xlabel('AP')
    ax.set_title(title, fontsize=10)
    ax.grid(axis='x', alpha=0.3)
    figure.tight_layout()
    _save(figure, path)
    return dict(zip(classes, aps))


def draw_confusion(matrix, classes, path, iou_thresh, score_thresh, num_images=None):
    """The confusion matrix of `gluondet.metrics.confusion.ConfusionMatrix`: counts
    written in the cells (up to 30 classes), colour the share of the true class's column.

    Returns the matrix drawn.
    """
    matrix = np.asarray(matrix)
    names = list(classes) + ['background']
    side = len(names)
    size = max(5.0, 0.42 * side + 2.5)
    figure = _figure(size + 1.0, size)
    ax = figure.add_subplot(1, 1, 1)
    totals = matrix.sum(axis=0, keepdims=True)
    share = np.divide(matrix, totals, out=np.zeros(matrix.shape), where=totals > 0)
    image = ax.imshow(share, cmap='Blues', vmin=0, vmax=1)
    figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04).set_label(
        'share of the column (true class)', fontsize=8)
    if side <= _MAX_ANNOTATED:
        for (p, t), count in np.ndenumerate(matrix):
            if count:
                ax.text(t, p, str(count), ha='center', va='center', fontsize=7,
                        color='white' if share[p, t] > 0.6 else 'black')
    ax.set_xticks(range(side))
    ax.set_yticks(range(side))
    ax.set_xticklabels(names, rotation=90, fontsize=8)
    ax.set_yticklabels(names, fontsize=8)
    ax.set_xlabel('true')
    ax.set_ylabel('predicted')
    images = '' if num_images is None else ', %d images' % num_images
    ax.set_title('IoU \u2265 %g, score \u2265 %g%s\nbackground row: missed ground truths; '
                 'background column: false detections' % (iou_thresh, score_thresh, images),
                 fontsize=9)
    figure.tight_layout()
    _save(figure, path)
    return matrix


def evaluation_plots(voc, confusion, folder, description='VOC'):
    """Write ``pr_curves.png``, ``confusion_matrix.png`` and ``ap_per_class.png``.

    Parameters
    ----------
    voc : VOCMApMetric
        Updated, with class names: the APs are its ``get()``, the curves its ``curves()``.
    confusion : ConfusionMatrix
        Updated on the same detections.
    folder : str
    description : str
        What the AP is ('VOC07 11-point AP, IoU 0.5'), for the titles.

    Returns
    -------
    dict
        ``{file: what was drawn}``: the ``{class: AP}`` of the curves and the bars, and
        the confusion matrix.
    """
    names, values = voc.get()
    classes, aps, mean_ap = names[:-1], values[:-1], values[-1]
    title = '%s; mAP %s' % (description, _ap_text(mean_ap))
    paths = [os.path.join(folder, name) for name in EVALUATION_FILES]
    return {
        paths[0]: draw_pr_curves(voc.curves(), classes, aps, paths[0], title),
        paths[1]: draw_confusion(confusion.get(), classes, paths[1], confusion.iou_thresh,
                                 confusion.score_thresh, confusion.num_images),
        paths[2]: draw_ap_bars(classes, aps, mean_ap, paths[2], title),
    }
