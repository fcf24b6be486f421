"""MXNet RecordIO data: ``gluondet convert``, `RecordDetection`, GluonCV's layout both ways."""
import glob
import json
import os
import struct
import sys

import mxnet as mx
import numpy as np
import pytest

from gluondet.errors import UserError
from gluondet import cli
from gluondet.data import (DatasetError, DemoDetection, KITTIDetection, RecordDetection,
                           VOCDetection, resolve_dataset, write_kitti)
from gluondet.data.record import MAGIC, encode_label, read_index
from gluondet.data import demo as demo_data
from gluondet.tools import convert as convert_mod
from gluondet.tools.convert import convert, partition, shard

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_runs import run  # noqa: E402

BCCD_CLASSES = ('RBC', 'WBC', 'Platelets')


@pytest.fixture(scope='module')
def bccd(bccd_root):
    return VOCDetection(os.path.join(bccd_root, 'BCCD'), splits=('trainval', 'test'),
                        classes=BCCD_CLASSES)


@pytest.fixture(scope='module')
def bccd_val(bccd_root):
    return VOCDetection(os.path.join(bccd_root, 'BCCD'), splits=('val',), classes=BCCD_CLASSES)


def _same_items(source, records, pixel_stride=1):
    """Every item of ``records`` equals the same-index item of ``source`` (the pixels of every
    ``pixel_stride``-th)."""
    assert len(records) == len(source)
    assert records.classes == source.classes
    for i in range(len(source)):
        assert records.image_size(i) == source.image_size(i)
        np.testing.assert_array_equal(records.label(i), source.label(i))
        assert records.label(i).dtype == np.float32
        if i % pixel_stride == 0:
            image, label = records[i]
            np.testing.assert_array_equal(image.asnumpy(), source[i][0].asnumpy())
            np.testing.assert_array_equal(label, source.label(i))


def test_bccd_round_trip_gives_the_same_labels_and_pixels(bccd, tmp_path):
    prefix = str(tmp_path / 'bccd')
    summary = convert(bccd, prefix, partition_mode='sequence', num_shards=3)
    files = sorted(glob.glob(prefix + '-fold-000-of-001-shard-*-of-00003.rec'))
    assert [os.path.basename(f) for f in files] == summary['folds'][0]['files']
    assert all(os.path.isfile(f[:-4] + '.idx') for f in files)
    records = RecordDetection(prefix + '-fold-000-of-001-shard-*.rec')  # classes from the json
    _same_items(bccd, records, pixel_stride=7)
    assert summary['images'] == len(bccd) == 364
    assert summary['objects'] == {c: int(sum((bccd.label(i)[:, 4] == k).sum()
                                             for i in range(len(bccd))))
                                  for k, c in enumerate(BCCD_CLASSES)}
    assert summary['left_out']['dropped'] == {'zero_area': 2}     # BCCD's two, reported
    assert 'difficult' in summary['layout']['object']


def test_kitti_round_trip_keeps_fractional_boxes_exactly(bccd_val, tmp_path):
    folder = tmp_path / 'kitti'
    write_kitti(bccd_val, str(folder))
    # KITTI boxes are fractional: make some that a normalized float32 cannot bring back
    label_dir = folder / 'label_2'
    names = sorted(os.listdir(str(label_dir)))[:3]
    for k, name in enumerate(names):
        (label_dir / name).write_text(
            'RBC 0 0 0 %.2f 7.58 563.81 %.2f 0 0 0 0 0 0 0\n' % ((1.42, 2.61, 2.82)[k], 470.93 - k)
            + 'WBC 0 0 0 3.00 5.00 7.00 9.00 0 0 0 0 0 0 0\nDontCare 0 0 0 1 1 5 5 0 0 0 0 0 0 0\n')
    kitti = KITTIDetection(str(folder), classes=BCCD_CLASSES,
                           class_mapping={c: c for c in BCCD_CLASSES})
    assert kitti.label(0)[0, 0] == np.float32(1.42)
    prefix = str(tmp_path / 'out' / 'k')
    argv = ['convert', '--dataset', 'kitti', '--dataset-root', str(folder), '--classes',
            ','.join(BCCD_CLASSES), '-o', prefix, '--partition-mode', 'sequence']
    assert cli.main(argv) == 0
    records = RecordDetection(prefix + '-fold-000-of-001-shard-00000-of-00001.rec')
    _same_items(kitti, records)
    # what GluonCV computes (the normalized rows times the size, in float32) is a float32
    # step off for some of these boxes; the pixel boxes in the header are exact
    off = 0
    for i in range(3):
        width, height = kitti.image_size(i)
        scale = np.array([width, height, width, height], np.float32)
        rows = (kitti.label(i)[:, :4] / scale.astype(np.float64)).astype(np.float32)
        off += int(((rows * scale).astype(np.float32) != kitti.label(i)[:, :4]).sum())
    assert off > 0


def test_gluoncv_reads_our_records_as_we_do(bccd_val, tmp_path):
    from gluoncv.data import RecordFileDetection
    prefix = str(tmp_path / 'val')
    empty = bccd_val.label(1)[:0]
    convert(_WithEmpty(bccd_val, 1), prefix, partition_mode='sequence')
    path = prefix + '-fold-000-of-001-shard-00000-of-00001.rec'
    ours, theirs = RecordDetection(path), RecordFileDetection(path)
    assert len(theirs) == len(ours) == len(bccd_val)
    for i in range(len(ours)):
        image, label = theirs[i]
        assert label.shape[1] == 6
        if i == 1:      # no objects: one padding row of -1
            np.testing.assert_allclose(label, -np.ones((1, 6)), rtol=1e-6)
            assert ours.label(i).shape == empty.shape
            continue
        # GluonCV scales the normalized rows back in float32: within a float32 step
        np.testing.assert_allclose(label, ours.label(i), rtol=2e-7, atol=0)
        if i < 10:
            np.testing.assert_array_equal(image.asnumpy(), ours[i][0].asnumpy())


class _WithEmpty:
    """A dataset with the boxes of item ``empty`` removed."""

    def __init__(self, dataset, empty):
        self.dataset, self.empty = dataset, empty
        self.classes, self.report = dataset.classes, dataset.report

    def __len__(self):
        return len(self.dataset)

    def __getattr__(self, name):
        return getattr(self.dataset, name)

    def label(self, idx):
        label = self.dataset.label(idx)
        return label[:0] if idx == self.empty else label


def _gluoncv_lst_line(index, dataset, i, with_size=True, difficult=False):
    """A line of GluonCV's detection .lst (its tutorial's layout): idx, A, B, [w, h],
    rows [id, xmin/w, ymin/h, xmax/w, ymax/h, (difficult)], path."""
    width, height = dataset.image_size(i)
    label = dataset.label(i)
    rows = np.concatenate([label[:, 4:5], label[:, :4] / [width, height, width, height]]
                          + ([label[:, 5:6]] if difficult else []), axis=1)
    header = [4, rows.shape[1], width, height] if with_size else [2, rows.shape[1]]
    values = [str(v) for v in header] + ['%.10f' % v for v in rows.ravel()]
    return '\t'.join([str(index)] + values + [os.path.basename(dataset.image_path(i))])


def test_we_read_im2rec_files_in_gluoncvs_layout(bccd_val, tmp_path):
    """im2rec.py --pack-label of GluonCV's .lst (A=4 with the size), and MXNet's own packing
    with A=2 and a difficult column (the size then comes from the image)."""
    count = 6
    image_dir = os.path.dirname(bccd_val.image_path(0))
    lst = tmp_path / 'bccd.lst'
    lst.write_text(''.join(_gluoncv_lst_line(i, bccd_val, i) + '\n' for i in range(count)))
    out = run('-m', 'mxnet.tools.im2rec', str(tmp_path / 'bccd'), image_dir, '--pack-label',
              '--pass-through', '--num-thread', '1')
    assert out.returncode == 0, out.stderr[-2000:]
    im2rec = RecordDetection(str(tmp_path / 'bccd.rec'), classes=BCCD_CLASSES)

    path = str(tmp_path / 'mx.rec')
    writer = mx.recordio.MXIndexedRecordIO(path[:-4] + '.idx', path, 'w')
    for i in range(count):
        fields = _gluoncv_lst_line(i, bccd_val, i, with_size=False, difficult=True).split('\t')
        header = mx.recordio.IRHeader(0, np.array(fields[1:-1], np.float32), i, 0)
        with open(bccd_val.image_path(i), 'rb') as f:
            writer.write_idx(i, mx.recordio.pack(header, f.read()))
    writer.close()
    packed = RecordDetection(path, classes=BCCD_CLASSES)
    for records in (im2rec, packed):
        assert len(records) == count
        for i in range(count):
            assert records.image_size(i) == bccd_val.image_size(i)
            # normalized float32 rows: the pixels come back within a float32 step
            np.testing.assert_allclose(records.label(i), bccd_val.label(i), rtol=2e-7)
            if i < 2:
                np.testing.assert_array_equal(records[i][0].asnumpy(),
                                              bccd_val[i][0].asnumpy())


def test_partitions_and_shards():
    assert partition(10, 'sequence') == [list(range(10))]
    assert partition(10, 'sequence', val_split=30) == [[0, 1, 2], list(range(3, 10))]
    assert partition(9, 'sequence', num_partitions=3) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    random_folds = partition(100, 'random', val_split=25, seed=1)
    assert [len(f) for f in random_folds] == [25, 75]
    assert sorted(sum(random_folds, [])) == list(range(100))
    assert random_folds != partition(100, 'sequence', val_split=25)
    assert random_folds == partition(100, 'random', val_split=25, seed=1)
    assert random_folds != partition(100, 'random', val_split=25, seed=2)
    assert [len(s) for s in shard(list(range(10)), 4)] == [2, 3, 2, 3]
    assert sum(shard(list(range(10)), 4), []) == list(range(10))
    for bad in (dict(val_split=20, num_partitions=3), dict(val_split=100),
                dict(num_partitions=0), dict(mode='blocks')):
        with pytest.raises(ValueError):
            partition(10, **bad)


def test_convert_command_writes_folds_shards_and_counts(bccd_root, tmp_path, capsys):
    prefix = str(tmp_path / 'b')
    argv = ['convert', '--dataset', 'voc', '--dataset-root', os.path.join(bccd_root, 'BCCD'),
            '--split', 'train', '--classes', ','.join(BCCD_CLASSES), '-o', prefix,
            '--val-split', '25', '--num-shards', '4', '--seed', '7']
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    source = resolve_dataset('voc', os.path.join(bccd_root, 'BCCD'), 'train', BCCD_CLASSES,
                             train=True)
    with open(prefix + '.json') as f:
        summary = json.load(f)
    folds = summary['folds']
    assert [f['role'] for f in folds] == ['val', 'train']
    assert [f['images'] for f in folds] == [len(source) // 4, len(source) - len(source) // 4]
    loaded = []
    for fold in (0, 1):
        shards = sorted(glob.glob('%s-fold-%03d-of-002-shard-*-of-00004.rec' % (prefix, fold)))
        assert len(shards) == 4
        sizes = [len(read_index(p)) for p in shards]
        assert max(sizes) - min(sizes) <= 1 and sum(sizes) == folds[fold]['images']
        records = RecordDetection('%s-fold-%03d-of-002-shard-*.rec' % (prefix, fold))
        counts = np.bincount(np.concatenate([records.label(i)[:, 4] for i in
                                             range(len(records))]).astype(int), minlength=3)
        assert dict(zip(BCCD_CLASSES, counts.tolist())) == folds[fold]['objects']
        loaded.append(sorted(tuple(records.label(i).ravel()) for i in range(len(records))))
    # the folds are the source's images, once each
    assert sorted(loaded[0] + loaded[1]) == sorted(tuple(source.label(i).ravel())
                                                   for i in range(len(source)))
    assert ("--train-rec '%s-fold-001-of-002-shard-*-of-00004.rec'" % prefix) in printed
    # flags that do not go together: one line, exit code 1
    assert cli.main(argv[:-6] + ['--val-split', '20', '--num-partitions', '3']) == 1
    assert 'makes 2 partitions' in capsys.readouterr().err


def test_convert_masks_writes_records_mask_rcnn_reads(tmp_path, monkeypatch, capsys):
    """``gluondet convert --masks`` of the demo shapes: records whose masks equal the source's,
    boxes with an unmapped class dropped with their masks."""
    monkeypatch.setenv('GLUONDET_HOME', str(tmp_path / 'home'))
    monkeypatch.setitem(demo_data.DEFAULT_NUM_IMAGES, 'train', 6)
    prefix = str(tmp_path / 'shapes')
    assert cli.main(['convert', '--dataset', 'demo', '--masks', '--partition-mode', 'sequence',
                     '-o', prefix]) == 0
    capsys.readouterr()
    source = DemoDetection('train', num_images=6, masks=True, root=str(tmp_path / 'home' / 'demo'))
    records = RecordDetection(prefix + '-fold-000-of-001-shard-00000-of-00001.rec', masks=True)
    assert len(records) == len(source)
    for i in range(len(source)):
        size = source.image_size(i)
        np.testing.assert_array_equal(records.label(i), source.label(i))
        np.testing.assert_array_equal(records.masks(i).bitmaps(size[1], size[0]),
                                      source.masks(i).bitmaps(size[1], size[0]))
    kept = convert(source, str(tmp_path / 'circles'), 'sequence',
                   class_mapping={'circle': 'circle'})
    circles = RecordDetection(str(tmp_path / 'circles') + '-fold-000-of-001-shard-*.rec',
                              masks=True)
    assert kept['classes'] == ['circle']
    for i in range(len(circles)):
        mine = source.label(i)[:, 4] == 0
        size = source.image_size(i)
        np.testing.assert_array_equal(circles.masks(i).bitmaps(size[1], size[0]),
                                      source.masks(i)[mine].bitmaps(size[1], size[0]))


def test_class_mapping_many_to_one(bccd_val, tmp_path):
    prefix = str(tmp_path / 'm')
    summary = convert(bccd_val, prefix, class_mapping={'RBC': 'cell', 'WBC': 'cell',
                                                       'Platelets': 'platelet'})
    assert summary['classes'] == ['cell', 'platelet']
    records = RecordDetection(prefix + '-fold-000-of-001-shard-*.rec')
    assert records.classes == ('cell', 'platelet')
    totals = {c: sum(int((bccd_val.label(i)[:, 4] == k).sum()) for i in range(len(bccd_val)))
              for k, c in enumerate(BCCD_CLASSES)}
    assert summary['objects'] == {'cell': totals['RBC'] + totals['WBC'],
                                  'platelet': totals['Platelets']}
    # a class the mapping leaves out is dropped and counted; --classes orders the targets
    summary = convert(bccd_val, prefix + '2', class_mapping={'WBC': 'white'},
                      classes=('other', 'white'))
    assert summary['classes'] == ['other', 'white']
    assert summary['objects'] == {'other': 0, 'white': totals['WBC']}
    assert summary['left_out']['dropped']['unmapped_class'] == totals['RBC'] + totals['Platelets']
    # records read with other classes are matched by name; unknown names are dropped
    records = RecordDetection(prefix + '-fold-000-of-001-shard-*.rec', classes=('platelet',))
    assert records.report.dropped['unknown_class'] == totals['RBC'] + totals['WBC']
    with pytest.raises(ValueError, match="maps 'wbc' to 'white', which is not one of"):
        convert(bccd_val, prefix + '3', class_mapping={'WBC': 'white'}, classes=('other',))


def _small_records(dataset, tmp_path, count=5):
    subset = _Subset(dataset, count)
    prefix = str(tmp_path / 's')
    convert(subset, prefix, partition_mode='sequence')
    return prefix + '-fold-000-of-001-shard-00000-of-00001.rec'


class _Subset(_WithEmpty):
    def __init__(self, dataset, count):
        super().__init__(dataset, -1)
        self.count = count

    def __len__(self):
        return self.count


def test_a_damaged_record_or_a_missing_index_names_the_file(bccd_val, tmp_path):
    path = _small_records(bccd_val, tmp_path)
    offsets = [offset for _, offset in read_index(path)]
    data = bytearray(open(path, 'rb').read())
    data[offsets[2]:offsets[2] + 4] = b'\0\0\0\0'            # record 2 loses its marker
    open(path, 'wb').write(bytes(data))
    with pytest.raises(DatasetError, match=r'%s#2: record: no RecordIO marker'
                       % os.path.basename(path)):
        RecordDetection(path, on_error='raise')
    records = RecordDetection(path)
    assert len(records) == 4 and records.report.skipped == {'bad_record': 1}

    data[offsets[2]:offsets[2] + 4] = struct.pack('<I', MAGIC)
    open(path, 'wb').write(bytes(data[:offsets[4] + 3000]))  # the last one is cut short
    assert len(RecordDetection(path)) == 5      # its header and label are there
    with pytest.raises(DatasetError, match=r'#4: record: truncated'):
        RecordDetection(path, on_error='raise')[4]
    open(path, 'wb').write(bytes(data[:offsets[3] + 4]))    # a copy cut short: records lost
    records = RecordDetection(path)
    assert len(records) == 3 and records.report.skipped == {'bad_record': 2}
    assert 'truncated (the file ends before it)' in records.report.examples['bad_record'][1]

    os.remove(path[:-4] + '.idx')
    with pytest.raises(DatasetError, match=r'%s: index: no index file %s'
                       % (path, os.path.basename(path[:-4] + '.idx'))):
        RecordDetection(path)
    with pytest.raises(DatasetError, match='no .rec file matches'):
        RecordDetection(str(tmp_path / 'nothing-*.rec'))


def test_a_bad_label_is_a_counted_skip_and_multi_part_records_read(bccd_val, tmp_path):
    path = str(tmp_path / 'odd.rec')
    with open(bccd_val.image_path(0), 'rb') as f:
        image = f.read()
    width, height = bccd_val.image_size(0)
    good = encode_label(bccd_val.label(0), width, height)
    writer = mx.recordio.MXIndexedRecordIO(path[:-4] + '.idx', path, 'w')
    magic = np.frombuffer(struct.pack('<I', MAGIC), np.float32)[0]
    labels = [good, good[:-1], np.array([7.], np.float32),
              np.concatenate([good, [magic] * 6]),             # the marker inside the label
              np.concatenate([good[:-12], [np.nan, .1, .1, .2, .2, 0],
                              [9, .1, .1, .2, .2, 0]]).astype(np.float32)]
    for key, label in enumerate(labels):
        writer.write_idx(key, mx.recordio.pack(mx.recordio.IRHeader(0, label, key, 0), image))
    writer.close()
    with pytest.raises(DatasetError, match=r'odd.rec#1: label: .* do not make a header'):
        RecordDetection(path, classes=BCCD_CLASSES, on_error='raise')
    records = RecordDetection(path, classes=BCCD_CLASSES)
    assert records.report.skipped == {'bad_annotation': 2}
    assert records.report.dropped['unknown_class'] == 1 and records.report.dropped[
        'bad_annotation'] == 1
    assert len(records) == 3
    for i in range(3):
        np.testing.assert_array_equal(records[i][0].asnumpy(), bccd_val[0][0].asnumpy())
    np.testing.assert_array_equal(records.label(0), bccd_val.label(0))
    with pytest.raises(DatasetError, match='no class names'):
        RecordDetection(path)


def test_a_failed_conversion_leaves_no_file_and_keeps_the_last_good_one(bccd_val, tmp_path,
                                                                       monkeypatch):
    prefix = str(tmp_path / 'a')
    convert(_Subset(bccd_val, 6), prefix, num_shards=2)
    before = {p: open(p, 'rb').read() for p in glob.glob(prefix + '*')}
    assert len(before) == 5
    calls = []
    real = convert_mod._encoded

    def failing(dataset, idx):
        calls.append(idx)
        if len(calls) % 5 == 0:
            raise KeyboardInterrupt('killed')
        return real(dataset, idx)

    monkeypatch.setattr(convert_mod, '_encoded', failing)
    with pytest.raises(KeyboardInterrupt):
        convert(_Subset(bccd_val, 8), prefix, num_shards=2)
    with pytest.raises(KeyboardInterrupt):
        convert(_Subset(bccd_val, 8), str(tmp_path / 'new' / 'b'), num_shards=3)
    assert {p: open(p, 'rb').read() for p in glob.glob(str(tmp_path / '**' / '*'),
                                                         recursive=True)
            if os.path.isfile(p)} == before


def test_records_read_in_dataloader_workers(bccd_val, tmp_path):
    records = RecordDetection(_small_records(bccd_val, tmp_path, 4))
    records[0]      # a descriptor opened before the workers start is shared with them
    expected = [(bccd_val.image_size(i)[1], len(bccd_val.label(i))) for i in range(4)] * 3
    for thread_pool in (False, True):
        loader = mx.gluon.data.DataLoader(
            mx.gluon.data.SimpleDataset(list(range(4)) * 3).transform(
                lambda i: (records[i][0].shape[0], records[i][1].shape[0])),
            batch_size=2, num_workers=2, thread_pool=thread_pool)
        got = [b for batch in loader for b in zip(*(v.asnumpy().tolist() for v in batch))]
        assert got == expected


def test_rec_flags_go_together(tmp_path):
    import argparse
    from gluondet.train.common import build_datasets
    args = argparse.Namespace(train_json='', val_json='', train_rec='a.rec', val_rec='',
                              dataset='voc')
    with pytest.raises(UserError, match='--train-rec and --val-rec go together'):
        build_datasets(args)
    with pytest.raises(ValueError, match='the rec dataset needs its record files'):
        resolve_dataset('rec')
    with pytest.raises(ValueError, match='record files go with the rec dataset'):
        resolve_dataset('voc', str(tmp_path), records='a.rec')


def test_train_script_runs_an_epoch_from_records_and_evaluate_reads_them(tmp_path, capsys):
    """train_ssd.py --dataset rec on converted demo data, then gluondet evaluate --dataset rec."""
    home = str(tmp_path / 'home')
    paths = {}
    for split, count in (('train', 8), ('val', 4)):
        demo = DemoDetection(split, num_images=count, root=home)
        convert(demo, str(tmp_path / split), partition_mode='sequence')
        paths[split] = str(tmp_path / split) + '-fold-000-of-001-shard-*.rec'
    name = 'ssd_300_mobilenet0.25_custom'
    out = run(os.path.join(ROOT, 'scripts', 'train_ssd.py'), '--dataset', 'rec', '--train-rec',
              paths['train'], '--val-rec', paths['val'], '--network', 'mobilenet0.25',
              '--data-shape', '128', '--batch-size', '4', '--epochs', '1', '--gpus', '',
              '--no-pretrained-base', '-j', '0', cwd=str(tmp_path),
              env=dict(os.environ, GLUONDET_HOME=home))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith('final: ') and 'mAP=' in out.stdout
    assert glob.glob(str(tmp_path / (name + '_last-00000002-*.params')))   # 8 images, 2 steps
    model = str(tmp_path / (name + '_best.params'))
    assert cli.main(['evaluate', '--model', model, '--dataset', 'rec', '--rec', paths['val']]
                    ) == 0
    assert 'on 4 images' in capsys.readouterr().out


EVIL = [np.nan, np.inf, -np.inf, -1., 0., 1e30, -1e30, 0.5, 3.7, 2 ** 31, 65., 1e-30]


def _fuzz_case(folder, seed):
    """Write a small record file, damage it one seeded way; return (path, description)."""
    from filetools import jpeg
    rng = np.random.RandomState(seed)
    path = os.path.join(folder, 'f%d.rec' % seed)
    label = np.array([[2, 3, 20, 15, 0, 0], [30, 10, 55, 40, 1, 1]], np.float32)
    vectors = [encode_label(label, 64, 48), encode_label(label[:1], 64, 48),
               encode_label(label[:0], 64, 48)]
    kind = seed % 4
    if kind == 0:       # evil values in a label
        target = vectors[rng.randint(3)]
        for _ in range(rng.randint(1, 4)):
            target[rng.randint(target.size)] = EVIL[rng.randint(len(EVIL))]
    writer = mx.recordio.MXIndexedRecordIO(path[:-4] + '.idx', path, 'w')
    for key, vector in enumerate(vectors):
        header = mx.recordio.IRHeader(0, vector, key, 0)
        writer.write_idx(key, mx.recordio.pack(header, jpeg()))
    writer.close()
    data = bytearray(open(path, 'rb').read())
    if kind == 1:       # garbage bytes
        for _ in range(rng.randint(1, 6)):
            data[rng.randint(len(data))] = rng.randint(256)
        open(path, 'wb').write(bytes(data))
    elif kind == 2:     # truncated
        open(path, 'wb').write(bytes(data[:rng.randint(len(data))]))
    elif kind == 3:     # a damaged index
        lines = open(path[:-4] + '.idx').read().splitlines()
        lines[rng.randint(len(lines))] = ['', 'x\t0', '1', '0\t-5', '0\t999999', '2\t7',
                                          '0\t0\t0', '\x00'][rng.randint(8)]
        open(path[:-4] + '.idx', 'w').write('\n'.join(lines) + '\n')
    return path, ('evil label values', 'garbage bytes', 'truncated', 'damaged index')[kind]


@pytest.mark.parametrize('on_error', ['skip', 'raise'])
def test_damaged_record_files_are_dataset_errors_or_counted_skips(tmp_path, on_error):
    """Seeded damage: a record file loads (what is left out counted) or raises DatasetError,
    never another exception, in both modes and when its items are read."""
    for seed in range(120):
        path, what = _fuzz_case(str(tmp_path), seed)
        try:
            records = RecordDetection(path, classes=('cat', 'dog'), on_error=on_error)
            for i in range(len(records)):
                image, label = records[i]
                assert label.dtype == np.float32 and np.all(np.isfinite(label))
                assert np.all(label[:, :4] >= 0) and np.all(label[:, [0, 2]] <= 63)
        except DatasetError:
            pass
        except Exception as err:    # noqa: B902 - the point of the test
            raise AssertionError('seed %d (%s): %r' % (seed, what, err)) from err
