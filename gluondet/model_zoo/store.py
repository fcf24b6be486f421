"""Local store of pretrained weights, compatible with GluonCV's ``~/.mxnet/models``.

A weight file is named as in GluonCV, ``{name}-{first 8 hex of its sha1}.params``,
so files a GluonCV user already has are found and verified. A missing or
damaged file is downloaded from ``{repo}/models/{file_name}.zip`` (GluonCV's
zip archive holding the ``.params``) or, if the server has no archive,
``{repo}/models/{file_name}`` (the plain ``.params``). The repository is

1. ``$GLUONDET_REPO_URL`` if set, else
2. ``$MXNET_GLUON_REPO`` + ``gluon`` (GluonCV's mirror variable), else
3. ``https://apache-mxnet.s3-accelerate.dualstack.amazonaws.com/gluon``
   (``DEFAULT_REPO_URL``, where GluonCV downloads from).

Downloads go to a temporary file in the store, are checked against the sha1
and only then renamed into place; a file lock (the same ``{name}-{hash}.lock``
as GluonCV's) keeps two processes from downloading the same file at once.
"""
import difflib
import glob
import hashlib
import logging
import os
import re
import shutil
import time
import uuid
import zipfile
import zlib

import filelock
import requests
from tqdm import tqdm

from ..errors import UserError

__all__ = ['MODEL_SHA1', 'WeightStoreError', 'get_model_file', 'pretrained_model_list', 'purge',
           'short_hash']

DEFAULT_ROOT = os.path.join('~', '.mxnet', 'models')
DEFAULT_REPO_URL = 'https://apache-mxnet.s3-accelerate.dualstack.amazonaws.com/gluon'
RETRIES = 2            # extra attempts after a network failure, a 5xx or a cut transfer
RETRY_WAIT = 2.0       # seconds before the first retry, doubled each time
HTTP_TIMEOUT = (15, 60)  # seconds to connect, and between two reads
LOCK_TIMEOUT = 3600    # seconds to wait for another process downloading the same file

logger = logging.getLogger(__name__)

#: sha1 of every weight file served, by model name (GluonCV 0.10.5's values).
MODEL_SHA1 = {
    # SSD
    'ssd_300_vgg16_atrous_voc': '0e169fbb64efdee6985c3c175ec4298c4bda0298',
    'ssd_300_vgg16_atrous_coco': 'b302ad8a8660345c368448141d8acf30b5a3801d',
    'ssd_512_vgg16_atrous_voc': 'daf8181b615b480236fcb8474545077891276945',
    'ssd_512_vgg16_atrous_coco': '5c86064290c05eccbdd88475376c71c595c8325c',
    'ssd_512_resnet50_v1_voc': '9c8b225a552614e4284a0f647331bfdc6940eb4a',
    'ssd_512_resnet50_v1_coco': 'c48351620d4f0cbc49e4f7a84c8e67ef8fdc6e09',
    'ssd_512_mobilenet1.0_voc': '37c180765a4eb3e67751d6bacac47bb9156f5fff',
    'ssd_512_mobilenet1.0_coco': 'da9756faa5b9b4e34dedcf83ee0733d5895796ad',
    # Faster R-CNN
    'faster_rcnn_resnet50_v1b_voc': '447328d89d70ae1e2ca49226b8d834e5a5456df3',
    'faster_rcnn_resnet50_v1b_coco': '5b4690fb7c5b62c44fb36c67d0642b633697f1bb',
    'faster_rcnn_fpn_resnet50_v1b_coco': '233572743bc537291590f4edf8a0c17c14b234bb',
    'faster_rcnn_resnet101_v1d_coco': 'a465eca35e78aba6ebdf99bf52031a447e501063',
    'faster_rcnn_fpn_resnet101_v1d_coco': '1194ab4ec6e06386aadd55820add312c8ef59c74',
    'mask_rcnn_resnet18_v1b_coco': 'e071cf1550bc0331c218a9072b59e9550595d1e7',
    'mask_rcnn_resnet50_v1b_coco': 'a3527fdc2cee5b1f32a61e5fd7cda8fb673e86e5',
    'mask_rcnn_resnet101_v1d_coco': '4a3249c584f81c2a9b5d852b742637cd692ebdcb',
    'mask_rcnn_fpn_resnet18_v1b_coco': '14a922c38b0b196fdb1f7141be4666c10476f426',
    'mask_rcnn_fpn_resnet50_v1b_coco': '1364d0afe4de575af5d4389d50c2dbf22449ceac',
    'mask_rcnn_fpn_resnet101_v1d_coco': '89c7d8669b677a05c6eaa25375ead9a174109c69',
    # YOLOv3
    'yolo3_darknet53_voc': 'f5ece5ce1422eeca3ce2908004e469ffdf91fd41',
    'yolo3_darknet53_coco': '09767802230b45af1c27697a2dad6d1ebaacc1e2',
    'yolo3_mobilenet1.0_voc': '3b47835ac3dd80f29576633949aa58aee3094353',
    'yolo3_mobilenet1.0_coco': '66dbbae67be8f1e3cd3c995ce626a2bdc89769c6',
    # CenterNet (GluonCV publishes no center_net_dla34 weights)
    'center_net_resnet18_v1b_voc': '38c509d456a6e14e4c54e961ed43bffe8cf62840',
    'center_net_resnet18_v1b_coco': 'dccae71d1f069343326750bc9b0508a2a760dd80',
    'center_net_resnet18_v1b_dcnv2_voc': '04d1ed20ae3f8a150bc06d8007775a6df99e40b2',
    'center_net_resnet18_v1b_dcnv2_coco': '0874df9a5236297fd32ed401f0a699602ee6b42b',
    'center_net_resnet50_v1b_voc': 'f108427bc62c85f7bcbdba45db4c94a31fd4d4f6',
    'center_net_resnet50_v1b_coco': '28c64aaeaf9d5e4404afd2b96bf8812973d79eb9',
    'center_net_resnet50_v1b_dcnv2_voc': '61eb866d36ef68b1145a74a5b4e76ba262dbb4e4',
    'center_net_resnet50_v1b_dcnv2_coco': '2713a7ba29ab4da5f1939da5a53f97ed079441ca',
    'center_net_resnet101_v1b_voc': '5bf8b91f8813e82a2f2660c83560ffdfebf835a0',
    'center_net_resnet101_v1b_coco': '6f9cd4a945cb554c38539009eede20f45786519e',
    'center_net_resnet101_v1b_dcnv2_voc': 'a0e707225164fc578b5bb7187a79e6b492da8fb4',
    'center_net_resnet101_v1b_dcnv2_coco': '52daf2d9faca82c08924d08e7e0c253a782a1653',
    'center_net_mobilenetv3_large_duc_voc': '2cab979937586d3f8532d86130030c611ae38d2d',
    'center_net_mobilenetv3_large_duc_coco': 'bfc55dfd13ef8e9fd052141a3c42338179f5949d',
    'center_net_mobilenetv3_small_duc_voc': '8a8e9cbcbac3a496f0904dc22e148b1978ea672f',
    'center_net_mobilenetv3_small_duc_coco': 'f782057569a768faa03940d8106f944ffe3c9733',
    # ImageNet backbones (pretrained_base); GluonCV publishes no RetinaNet detector weights
    'vgg16_atrous': '4fa2e1ad96b8c8d1ba9e5a43556cd909d70b3985',
    'resnet18_v1': 'a0666292f0a30ff61f857b0b66efc0228eb6a54b',
    'resnet50_v1': 'cc729d95031ca98cf2ff362eb57dee4d9994e4b2',
    'resnet18_v1b': '2d9d980c990442f826f20781ed039851e78dabe3',
    'resnet34_v1b': '8e16b84814e84f64d897854003f049872991eaa6',
    'resnet50_v1b': '0ecdba34691be172036ddf244ff1b2eade75ffde',
    'resnet101_v1b': 'a455932aa95cb7dcfa05fd040b9b5a5660733c39',
    'resnet101_v1d': '1b2b825feff86b0354642a4ab59f9b6e35e47338',
    'darknet53': '2189ea49720a116dead245b9b252301cffa18d28',
    'mobilenet1.0': 'efbb2ca3881998d5a8c5cb6c457a28c1e085fed5',
    'mobilenet0.5': '0130d2aa2f7e3a63db35579b243e25f512172371',
    'mobilenet0.25': 'f0046a3da4e150b85da58ea31913dbb86e7540d1',
    'dla34': '5fd8d651eea4b8f3767174ea63bd0afc1fa541d8',
    'mobilenetv3_large': 'eaa44578554ddffaf2a2630ced9093181ff79688',
    'mobilenetv3_small': '10430433698d18f49991e4a366c9fce8f9286298',
}


class WeightStoreError(UserError, RuntimeError):
    """A weight file could not be found, downloaded or verified."""


class _Retryable(Exception):
    """A failure worth another attempt: network error, 5xx, transfer cut short."""


class _Refused(Exception):
    """The server answered but has no such file (4xx)."""


def pretrained_model_list():
    """Names that have pretrained weights in the store.

    Returns
    -------
    list of str
    """
    return list(MODEL_SHA1)


def short_hash(name):
    """First 8 hex digits of the sha1 of ``name``'s weight file.

    Raises
    ------
    ValueError
        If ``name`` has no pretrained weights (the message suggests close names).
    """
    return _expected_sha1(name)[:8]


def get_model_file(name, root=DEFAULT_ROOT):
    """Path of the verified weight file of ``name``, downloading it if needed.

    Parameters
    ----------
    name : str
        Model name, e.g. ``'ssd_512_mobilenet1.0_voc'`` or ``'resnet50_v1'``.
    root : str, default '~/.mxnet/models'
        Directory of weight files; created if missing. The default follows
        ``$MXNET_HOME/models`` when ``MXNET_HOME`` is set, as in GluonCV.

    Returns
    -------
    str
        ``{root}/{name}-{short_hash}.params``, whose sha1 has been checked.

    Raises
    ------
    ValueError
        If ``name`` has no pretrained weights.
    WeightStoreError
        If the file cannot be downloaded (the message says where to put it by
        hand) or the downloaded file has the wrong sha1 (nothing is saved).
    """
    sha1 = _expected_sha1(name)
    path = os.path.join(_resolve_root(root), '%s-%s.params' % (name, sha1[:8]))
    if _sha1_of(path) == sha1:
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lock_path = path[:-len('.params')] + '.lock'
    try:
        with filelock.FileLock(lock_path, timeout=LOCK_TIMEOUT):
            _fill(path, sha1)
    except filelock.Timeout:
        raise WeightStoreError('Waited %d s for another process downloading %s (lock %s)'
                               % (LOCK_TIMEOUT, path, lock_path)) from None
    return path


def purge(root=DEFAULT_ROOT):
    """Delete all weight files (``*.params``) and leftover partial downloads in ``root``.

    Returns
    -------
    list of str
        The paths removed.
    """
    root = _resolve_root(root)
    if not os.path.isdir(root):
        return []
    removed = [os.path.join(root, f) for f in sorted(os.listdir(root))
               if f.endswith(('.params', '.part'))]
    for path in removed:
        os.remove(path)
    return removed


def _expected_sha1(name):
    try:
        return MODEL_SHA1[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), MODEL_SHA1, n=3)
        hint = ' Did you mean %s?' % ' or '.join(repr(c) for c in close) if close else ''
        raise ValueError('No pretrained weights for model %r.%s All names: '
                         'gluondet.model_zoo.store.pretrained_model_list().'
                         % (name, hint)) from None


def _resolve_root(root):
    if root == DEFAULT_ROOT and os.environ.get('MXNET_HOME'):
        root = os.path.join(os.environ['MXNET_HOME'], 'models')
    return os.path.abspath(os.path.expanduser(root))


def _repo_url():
    url = os.environ.get('GLUONDET_REPO_URL')
    if not url and os.environ.get('MXNET_GLUON_REPO'):
        url = os.environ['MXNET_GLUON_REPO'].rstrip('/') + '/gluon'
    return (url or DEFAULT_REPO_URL).rstrip('/')


def _sha1_of(path):
    """Hex sha1 of the file at ``path``, or None if there is none."""
    if not os.path.isfile(path):
        return None
    digest = hashlib.sha1()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def _fill(path, sha1):
    """With the lock held: download a verified file to ``path`` unless one is there now."""
    found = _sha1_of(path)
    if found == sha1:
        return
    if found is not None:
        logger.warning('%s has sha1 %s, expected %s: downloading it again', path, found, sha1)
    for stale in glob.glob(glob.escape(path) + '.*.part'):  # left by a killed download
        os.remove(stale)
    file_name = os.path.basename(path)
    hint = _manual_hint(file_name.rsplit('-', 1)[0], path, sha1, found)
    stem = '%s.%s' % (path, uuid.uuid4().hex[:8])
    download, extracted = stem + '.download.part', stem + '.part'
    try:
        url = _download(file_name, download, hint)
        candidate = _unzip(download, extracted, url)
        got = _sha1_of(candidate)
        if got != sha1:
            raise WeightStoreError('Downloaded %s from %s, but its sha1 is %s, not %s: the server '
                                   'has a different file; nothing was saved. %s'
                                   % (file_name, url, got, sha1, hint))
        os.replace(candidate, path)
    finally:
        for part in (download, extracted):
            if os.path.exists(part):
                os.remove(part)


def _manual_hint(name, path, sha1, found):
    """How to install the file without the repository, for error messages."""
    there = ' (the file there now has sha1 %s)' % found if found else ''
    hint = ('To install it by hand, put %s (sha1 %s) at %s%s, or set GLUONDET_REPO_URL to a '
            'server that has it (now %s).'
            % (os.path.basename(path), sha1, path, there, _repo_url()))
    if not name.endswith(('_voc', '_coco')):
        hint += (' These are the ImageNet weights of the backbone %s (pretrained_base=True); '
                 'without them, pretrained_base=False (--no-pretrained-base in the training '
                 'scripts) trains it from scratch.' % name)
    return hint


def _download(file_name, dest, hint):
    """Fetch ``file_name`` (zip archive, else plain) into ``dest``; return the URL used."""
    base = '%s/models/%s' % (_repo_url(), file_name)
    refused = []
    for url in (base[:-len('.params')] + '.zip', base):
        try:
            _get_with_retries(url, dest)
            return url
        except _Refused as err:
            refused.append('%s: %s' % (url, err))
        except _Retryable as err:
            raise WeightStoreError('Cannot download %s from %s after %d attempts (%s). %s'
                                   % (file_name, url, RETRIES + 1, err, hint)) from None
    raise WeightStoreError('The server does not have %s (%s). %s'
                           % (file_name, '; '.join(refused), hint))


def _get_with_retries(url, dest, attempts=None, verify=True):
    """`_get`, tried up to ``attempts`` times (default ``RETRIES + 1``) on a _Retryable
    failure; ``verify``: check the server's TLS certificate."""
    attempts = RETRIES + 1 if attempts is None else attempts
    for attempt in range(attempts):
        try:
            _get(url, dest, verify)
            return
        except _Retryable as err:
            if attempt == attempts - 1:
                raise
            wait = RETRY_WAIT * 2 ** attempt
            logger.warning('Download of %s failed (%s); retrying in %g s', url, err, wait)
            time.sleep(wait)


def _get(url, dest, verify=True):
    """Save ``url`` to ``dest`` with a progress bar, or raise _Refused / _Retryable."""
    try:
        with requests.get(url, stream=True, timeout=HTTP_TIMEOUT, verify=verify,
                          headers={'Accept-Encoding': 'identity'}) as r:
            if r.status_code in (408, 429) or r.status_code >= 500:
                raise _Retryable('HTTP %d' % r.status_code)
            if r.status_code != 200:
                raise _Refused('HTTP %d' % r.status_code)
            _save(r, dest, os.path.basename(url))
    except requests.RequestException as err:
        # the innermost reason ("Failed to resolve 'host' (...)"), without urllib3's wrappers
        reason = str(getattr(err.args[0], 'reason', err) if err.args else err)
        reason = re.sub(r'^(<[^>]*>|HTTPS?Connection\([^)]*\)): ', '', reason)
        raise _Retryable('%s: %s' % (type(err).__name__, reason)) from None


def _save(response, dest, label):
    length = response.headers.get('Content-Length', '')
    total = int(length) if length.isdigit() else None
    received = 0
    with open(dest, 'wb') as f, tqdm(total=total, unit='B', unit_scale=True,
                                      unit_divisor=1024, desc=label) as bar:
        for chunk in response.iter_content(chunk_size=1 << 20):
            f.write(chunk)
            received += len(chunk)
            bar.update(len(chunk))
        f.flush()
        os.fsync(f.fileno())
    if total is not None and received != total:
        raise _Retryable('connection closed after %d of %d bytes' % (received, total))


def _unzip(archive, out, url):
    """Path of the downloaded .params: ``archive`` itself, or ``out`` extracted from it."""
    if not zipfile.is_zipfile(archive):
        return archive
    try:
        with zipfile.ZipFile(archive) as zf:
            members = [m for m in zf.namelist() if m.endswith('.params')]
            if len(members) != 1:
                raise WeightStoreError('%s should hold exactly one .params file, it holds %s'
                                       % (url, zf.namelist()))
            with zf.open(members[0]) as src, open(out, 'wb') as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
                dst.flush()
                os.fsync(dst.fileno())
    except (zipfile.BadZipFile, zlib.error, EOFError) as err:
        raise WeightStoreError('%s is a damaged zip archive: %s' % (url, err)) from None
    return out
