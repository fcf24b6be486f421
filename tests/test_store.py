"""Weight store: lookup, download, verification, against a real HTTP server on 127.0.0.1."""
import hashlib
import importlib.util
import io
import os
import re
import socket
import subprocess
import sys
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gluondet.model_zoo import store

NAME = 'tiny_net'
PAYLOAD = bytes(range(256)) * 1200          # 300 KiB stands in for a .params file
SHA1 = hashlib.sha1(PAYLOAD).hexdigest()
FILE_NAME = '%s-%s.params' % (NAME, SHA1[:8])
ZIP_URL = '/repo/models/%s.zip' % FILE_NAME[:-len('.params')]
PARAMS_URL = '/repo/models/%s' % FILE_NAME


def _zip(member, data):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, 'w', zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(member, data)
    return buf.getvalue()


def _ok(body, delay=0.0):
    """Serve ``body`` whole, pausing ``delay`` s halfway."""
    def respond(handler):
        handler.send_response(200)
        handler.send_header('Content-Length', str(len(body)))
        handler.end_headers()
        handler.wfile.write(body[:len(body) // 2])
        handler.wfile.flush()
        time.sleep(delay)
        handler.wfile.write(body[len(body) // 2:])
    return respond


def _truncated(body):
    """Announce more bytes than sent, send half, then close the connection."""
    def respond(handler):
        handler.send_response(200)
        handler.send_header('Content-Length', str(len(body) + 1000))
        handler.end_headers()
        handler.wfile.write(body[:len(body) // 2])
        handler.close_connection = True
    return respond


def _status(code):
    def respond(handler):
        handler.send_error(code)
    return respond


class _Handler(BaseHTTPRequestHandler):
    """Answers each path with its next responder in ``server.routes`` (the last repeats)."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.server.requests.append(self.path)
        queue = self.server.routes.get(self.path) or [_status(404)]
        respond = queue.pop(0) if len(queue) > 1 else queue[0]
        respond(self)

    def log_message(self, *args):
        pass


def _closed_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch):
    """A fake table entry, no retry waits, and no address but 127.0.0.1 reachable."""
    monkeypatch.setitem(store.MODEL_SHA1, NAME, SHA1)
    monkeypatch.setattr(store, 'RETRY_WAIT', 0.0)
    for var in ('MXNET_HOME', 'MXNET_GLUON_REPO', 'HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY',
                'http_proxy', 'https_proxy', 'all_proxy'):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv('NO_PROXY', '127.0.0.1')
    monkeypatch.setenv('GLUONDET_REPO_URL', 'http://127.0.0.1:%d/repo' % _closed_port())


@pytest.fixture
def server(monkeypatch):
    srv = ThreadingHTTPServer(('127.0.0.1', 0), _Handler)
    srv.routes, srv.requests = {}, []
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    monkeypatch.setenv('GLUONDET_REPO_URL', 'http://127.0.0.1:%d/repo/' % srv.server_port)
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join()


@pytest.fixture
def root(tmp_path):
    return str(tmp_path / 'models')


def _sha1(path):
    with open(path, 'rb') as f:
        return hashlib.sha1(f.read()).hexdigest()


def _leftovers(root):
    """Files in root other than the lock file."""
    return sorted(f for f in os.listdir(root) if not f.endswith('.lock'))


def test_short_hash_uses_gluoncv_naming():
    assert store.short_hash('resnet50_v1') == 'cc729d95'
    assert store.short_hash(NAME) == SHA1[:8]
    assert 'ssd_512_mobilenet1.0_voc' in store.pretrained_model_list()


def test_unknown_name_suggests_close_names(root):
    with pytest.raises(ValueError, match=r"'ssd_512_mobilenet1_0_voc'.*Did you mean "
                                         r"'ssd_512_mobilenet1.0_voc'"):
        store.get_model_file('ssd_512_mobilenet1_0_voc', root=root)
    with pytest.raises(ValueError, match='No pretrained weights'):
        store.short_hash('no_such_model_at_all')
    assert not os.path.exists(root)


def test_table_matches_gluoncv():
    spec = importlib.util.find_spec('gluoncv')
    if spec is None:
        pytest.skip('gluoncv (test extra) not installed')
    source = os.path.join(os.path.dirname(spec.origin), 'model_zoo', 'model_store.py')
    with open(source) as f:
        theirs = {n: s for s, n in re.findall(r"\('([0-9a-f]{40})', '([^']+)'\)", f.read())}
    ours = {n: s for n, s in store.MODEL_SHA1.items() if n != NAME}
    assert len(ours) >= 20
    for name in ('vgg16_atrous', 'resnet50_v1', 'resnet50_v1b', 'resnet18_v1', 'mobilenet1.0',
                 'mobilenet0.25', 'ssd_300_vgg16_atrous_voc', 'ssd_512_mobilenet1.0_coco',
                 'faster_rcnn_resnet50_v1b_voc'):
        assert name in ours
    assert {n: theirs.get(n) for n in ours} == ours


def test_download_zip_then_reuse(server, root):
    server.routes[ZIP_URL] = [_ok(_zip(FILE_NAME, PAYLOAD))]
    path = store.get_model_file(NAME, root=root)
    assert path == os.path.join(root, FILE_NAME)
    assert _sha1(path) == SHA1
    assert server.requests == [ZIP_URL]
    assert store.get_model_file(NAME, root=root) == path
    assert server.requests == [ZIP_URL]
    assert _leftovers(root) == [FILE_NAME]


def test_plain_params_when_no_zip(server, root):
    server.routes[PARAMS_URL] = [_ok(PAYLOAD)]
    path = store.get_model_file(NAME, root=root)
    assert _sha1(path) == SHA1
    assert server.requests == [ZIP_URL, PARAMS_URL]


def test_404_names_file_and_where_to_put_it(server, root):
    with pytest.raises(store.WeightStoreError) as err:
        store.get_model_file(NAME, root=root)
    message = str(err.value)
    assert 'HTTP 404' in message
    for part in (FILE_NAME, SHA1, os.path.join(root, FILE_NAME)):
        assert part in message
    assert server.requests == [ZIP_URL, PARAMS_URL]
    assert _leftovers(root) == []


@pytest.mark.parametrize('url, body', [(ZIP_URL, _zip(FILE_NAME, b'wrong bytes' * 99)),
                                       (PARAMS_URL, b'wrong bytes' * 99)])
def test_hash_mismatch_leaves_nothing(server, root, url, body):
    server.routes[url] = [_ok(body)]
    with pytest.raises(store.WeightStoreError, match='sha1 is [0-9a-f]{40}, not %s' % SHA1):
        store.get_model_file(NAME, root=root)
    assert _leftovers(root) == []


def test_damaged_zip_is_an_error(server, root):
    archive = bytearray(_zip(FILE_NAME, PAYLOAD))
    archive[100:110] = b'x' * 10         # inside the compressed data
    server.routes[ZIP_URL] = [_ok(bytes(archive))]
    with pytest.raises(store.WeightStoreError, match='damaged zip archive'):
        store.get_model_file(NAME, root=root)
    assert _leftovers(root) == []


@pytest.mark.parametrize('failure', [_truncated(_zip(FILE_NAME, PAYLOAD)), _status(503)])
def test_failed_transfer_is_retried(server, root, failure):
    server.routes[ZIP_URL] = [failure, _ok(_zip(FILE_NAME, PAYLOAD))]
    path = store.get_model_file(NAME, root=root)
    assert _sha1(path) == SHA1
    assert server.requests == [ZIP_URL, ZIP_URL]
    assert _leftovers(root) == [FILE_NAME]


def test_interrupted_transfer_leaves_no_partial_file(server, root):
    server.routes[ZIP_URL] = [_truncated(_zip(FILE_NAME, PAYLOAD))]
    with pytest.raises(store.WeightStoreError, match='after 3 attempts.*IncompleteRead'):
        store.get_model_file(NAME, root=root)
    assert server.requests == [ZIP_URL] * (store.RETRIES + 1)
    assert _leftovers(root) == []


def test_short_body_is_retryable_without_urllib3_check(tmp_path):
    """urllib3 < 2 does not enforce Content-Length; the store checks it itself."""
    class Response:
        headers = {'Content-Length': str(len(PAYLOAD))}

        @staticmethod
        def iter_content(chunk_size):
            yield PAYLOAD[:1000]

    with pytest.raises(store._Retryable, match='closed after'):
        store._save(Response, str(tmp_path / 'part'), 'label')


def test_offline_error_says_where_to_put_the_file(root):
    with pytest.raises(store.WeightStoreError, match='ConnectionError') as err:
        store.get_model_file(NAME, root=root)
    for part in (FILE_NAME, SHA1, os.path.join(root, FILE_NAME)):
        assert part in str(err.value)
    assert _leftovers(root) == []


def test_existing_good_file_used_without_network(root):
    os.makedirs(root)
    path = os.path.join(root, FILE_NAME)
    with open(path, 'wb') as f:
        f.write(PAYLOAD)
    assert store.get_model_file(NAME, root=root) == path
    assert os.listdir(root) == [FILE_NAME]


def test_mxnet_home_moves_the_default_root(monkeypatch, tmp_path):
    monkeypatch.setenv('MXNET_HOME', str(tmp_path))
    os.makedirs(tmp_path / 'models')
    path = str(tmp_path / 'models' / FILE_NAME)
    with open(path, 'wb') as f:
        f.write(PAYLOAD)
    assert store.get_model_file(NAME) == path


def test_corrupted_file_is_replaced(server, root):
    os.makedirs(root)
    path = os.path.join(root, FILE_NAME)
    with open(path, 'wb') as f:
        f.write(PAYLOAD[:-1] + b'!')
    with open(path + '.0badf00d.part', 'wb') as f:   # as a killed download leaves it
        f.write(b'partial')
    server.routes[ZIP_URL] = [_ok(_zip(FILE_NAME, PAYLOAD))]
    assert store.get_model_file(NAME, root=root) == path
    assert _sha1(path) == SHA1
    assert _leftovers(root) == [FILE_NAME]


def test_corrupted_file_and_offline_error_mentions_it(root):
    os.makedirs(root)
    bad = PAYLOAD[:-1] + b'!'
    with open(os.path.join(root, FILE_NAME), 'wb') as f:
        f.write(bad)
    with pytest.raises(store.WeightStoreError,
                       match='file there now has sha1 %s' % hashlib.sha1(bad).hexdigest()):
        store.get_model_file(NAME, root=root)


def test_concurrent_callers_download_once(server, root):
    server.routes[ZIP_URL] = [_ok(_zip(FILE_NAME, PAYLOAD), delay=0.5)]
    results = []

    def call():
        results.append(store.get_model_file(NAME, root=root))

    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert results == [os.path.join(root, FILE_NAME)] * 2
    assert server.requests == [ZIP_URL]
    assert _sha1(results[0]) == SHA1
    assert _leftovers(root) == [FILE_NAME]


CALLER = """
import sys
from gluondet.model_zoo import store
store.MODEL_SHA1[sys.argv[1]] = sys.argv[2]
print(store.get_model_file(sys.argv[1], root=sys.argv[3]))
"""


def test_concurrent_processes_download_once(server, root):
    server.routes[ZIP_URL] = [_ok(_zip(FILE_NAME, PAYLOAD), delay=1.0)]
    args = [sys.executable, '-c', CALLER, NAME, SHA1, root]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert [out.strip() for out, _ in outputs] == [os.path.join(root, FILE_NAME)] * 2
    assert server.requests == [ZIP_URL]
    assert _sha1(os.path.join(root, FILE_NAME)) == SHA1
    assert _leftovers(root) == [FILE_NAME]


def test_purge_removes_weights_and_partials_only(root):
    os.makedirs(root)
    for name in (FILE_NAME, 'other-12345678.params', FILE_NAME + '.abcd1234.part', 'notes.txt'):
        with open(os.path.join(root, name), 'wb') as f:
            f.write(b'x')
    removed = store.purge(root)
    assert sorted(os.path.basename(p) for p in removed) == sorted(
        [FILE_NAME, 'other-12345678.params', FILE_NAME + '.abcd1234.part'])
    assert os.listdir(root) == ['notes.txt']
    assert store.purge(os.path.join(root, 'missing')) == []
