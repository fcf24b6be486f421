"""TensorBoard images of augmented training batches with their ground-truth boxes (NVIDIA
TAO's ``training_config.visualizer``: ``enabled``, ``num_images``), for every task that can
show its batches.

A task shows a batch through an optional member of the task contract,
``batch_images(batch, count) -> [(image, boxes, names)]``: the first ``count`` images of a
training batch as the network sees them (augmented, resized and padded, the normalization
undone), ``H x W x 3`` uint8 RGB, each with its ground-truth boxes (``N x 4``, ``xmin, ymin,
xmax, ymax`` in those pixels) and their class names. `BatchImagesHook` writes them with the
run's TensorBoard writer, the boxes drawn, as ``train/images/<k>`` against the iteration:
after the first step of every epoch (TAO's cadence) or every ``interval`` steps; on the
first process only.
"""
from .hookbase import HookBase

__all__ = ['BatchImagesHook']


class BatchImagesHook(HookBase):
    """Writes the first ``count`` images of a training batch to TensorBoard.

    Parameters
    ----------
    reporter : Reporter
        Its TensorBoard writer (``config.logdir``) receives the images.
    count : int
        Images per batch shown (fewer if the batch on this process is smaller).
    interval : int
        Steps between two batches shown; 0: the first batch of every epoch.
    """

    def __init__(self, reporter, count, interval=0):
        self.reporter = reporter
        self.count, self.interval = int(count), int(interval)

    def before_train(self):
        if getattr(self.loop.task, 'batch_images', None) is None:
            raise ValueError('config.tb_images: task %s cannot show its training batches (it '
                             'has no batch_images method)' % type(self.loop.task).__name__)

    def after_step(self):
        state = self.loop.state
        due = (state.iteration % self.interval == 0 if self.interval else state.batch == 1)
        if due and self.reporter.has_tensorboard():
            shown = self.loop.task.batch_images(self.loop.current_batch, self.count)
            self.reporter.images('train/images', shown, state.iteration)
