"""The interface of a hook (`hooks` has the engine's own hooks and their order).

A hook sees the loop as ``self.loop`` (set when the loop is built) and may
keep state for resume through ``state_dict`` / ``load_state_dict`` (JSON-ready
dicts stored in the checkpoint manifest under the hook's class name) and, for arrays,
``state_arrays`` / ``load_state_arrays`` (NDArrays stored in the checkpoint's ``.states``
file as ``'<class name>/<key>'``).
"""


class HookBase:
    """No-op hook; subclasses override the stages they need."""

    loop = None

    def before_train(self):
        pass

    def before_epoch(self):
        pass

    def before_step(self):
        pass

    def after_step(self):
        pass

    def after_epoch(self):
        pass

    def after_validation(self, epoch, metrics):
        """A validation's ``{name: float}`` result (`ValidationHook` calls it on every hook
        before it checkpoints, so what a hook makes of it is in that checkpoint)."""

    def after_train(self):
        """Runs even when training stops with an error: release, do not save."""

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass

    def state_arrays(self):
        """``{key: NDArray}`` to checkpoint beside ``state_dict``."""
        return {}

    def load_state_arrays(self, arrays):
        """The ``state_arrays`` of the checkpoint (called after ``load_state_dict``, only
        when the checkpoint holds this hook's state)."""
