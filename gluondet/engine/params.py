"""Which parameters train, and their weight decay: applied to the net before the trainer exists.

A task may name its trainable parameters (``task.train_params(net)``, as
GluonCV's ``collect_train_params``); every other parameter gets
``grad_req='null'`` and stays out of the trainer, so it neither moves nor
has optimizer state. Params files and checkpoints still hold every
parameter (``net.save_parameters``).
"""

# GluonCV's --no-wd selection (train_yolo3.py): biases and BatchNorm's gamma and beta.
NO_WD_PATTERN = '.*beta|.*gamma|.*bias'


def trainable_params(task, net):
    """The parameters the trainer updates, in a stable order; freezes the others.

    Parameters
    ----------
    task : object
        ``task.train_params(net)``, if present, returns the trainable
        parameters (a ``ParameterDict``, a dict of them or a sequence);
        without it all parameters train.
    net : gluon.Block

    Returns
    -------
    list of gluon.Parameter
    """
    everything = list(net.collect_params().values())
    select = getattr(task, 'train_params', None)
    if select is None:
        return everything
    chosen = select(net)
    chosen = list(chosen.values()) if hasattr(chosen, 'values') else list(chosen)
    ids = {id(p) for p in chosen}
    foreign = sorted(p.name for p in chosen if id(p) not in {id(q) for q in everything})
    if foreign:
        raise ValueError('task.train_params returned parameters that are not the net\'s: %s'
                         % ', '.join(foreign[:5]))
    if not any(p.grad_req != 'null' for p in chosen):
        raise ValueError('task.train_params returned no parameter that takes a gradient')
    for param in everything:
        if id(param) not in ids:
            param.grad_req = 'null'
    # The net's order, whatever order the task gave: optimizer state indices follow it.
    return [p for p in everything if id(p) in ids]


def disable_weight_decay(net, pattern=NO_WD_PATTERN):
    """Set ``wd_mult = 0`` on the parameters whose names match ``pattern`` (a regex,
    as ``net.collect_params(pattern)``); returns their names."""
    params = net.collect_params(pattern)
    for param in params.values():
        param.wd_mult = 0.0
    return list(params.keys())
