"""COCO ids as files write them: ints or strings (TAO, pycocotools and other tools write both).

Ids match by value and type, as the keys of pycocotools' dicts: the string ``"7"`` is not
the image ``7``. A file that mixes the two for one image is named with the id and its other
form (`other_type`); one whose images have ids of both types is read, images ordered ints
first, then strings (`sort_key`: pycocotools' ``sorted`` would fail on it).
"""

__all__ = ['is_id', 'sort_key', 'other_type']


def is_id(value):
    """An int or str id (bools, floats, lists, dicts and null are not)."""
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def sort_key(value):
    """The order of ids of both types: ints by value, then strings."""
    return isinstance(value, str), value


def other_type(value, ids, where='images'):
    """``' (images has it as the int 7: ids must be of one type)'`` when ``ids`` hold
    ``value`` as the other of int and str, else ``''``."""
    if not is_id(value):
        return ''
    try:
        other = str(value) if isinstance(value, int) else int(value)
    except ValueError:
        return ''
    if other not in ids:
        return ''
    return ' (%s has it as the %s %r: ids must be of one type)' % (
        where, type(other).__name__, other)
