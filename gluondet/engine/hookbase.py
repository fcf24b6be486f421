"""The interface of a hook (`hooks` has the engine's own hooks and their order).

A hook sees the loop as ``self.loop`` (set when the loop is built) and may
keep state for resume through ``state_dict`` / ``load_state_dict`` (JSON-ready
dicts stored in the checkpoint manifest under the hook's class name).
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
