"""gluondet: object detection on Apache MXNet Gluon."""
import os
import re

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def read_version():
    with open(os.path.join(HERE, 'gluondet', 'version.py')) as f:
        return re.search(r"^__version__ = '([^']+)'", f.read(), re.M).group(1)


# mxnet-cu112 and the CUDA 11 libraries its libmxnet.so links (`readelf -d`: cudart 11.0,
# cublas 11, cufft 10, curand 10, cusolver 11, nvrtc 11.2, nvToolsExt 1, cudnn 8, nccl 2) from
# NVIDIA's PyPI wheels; gluondet/_mxnet.py loads them. The bounds keep those sonames (cuDNN 9
# has no libcudnn.so.8); constraints-cu112.txt pins the versions.
CU112 = [
    'mxnet-cu112==1.9.1',
    'nvidia-cuda-runtime-cu11>=11.7,<12',
    'nvidia-cublas-cu11>=11.10,<12',
    'nvidia-cufft-cu11>=10.7,<11',
    'nvidia-curand-cu11>=10.2,<11',
    'nvidia-cusolver-cu11>=11.4,<12',
    'nvidia-cuda-nvrtc-cu11>=11.7,<12',
    'nvidia-nvtx-cu11>=11.7,<12',
    'nvidia-cudnn-cu11>=8.5,<9',
    'nvidia-nccl-cu11>=2.13,<3',
]


setup(
    name='gluondet',
    version=read_version(),
    description='Object detection on Apache MXNet Gluon: SSD, Faster R-CNN, RetinaNet, '
                'VOC/COCO evaluation, ONNX and TensorRT export',
    long_description=open(os.path.join(HERE, 'README.md')).read(),
    long_description_content_type='text/markdown',
    license='Apache-2.0',
    python_requires='>=3.8',
    packages=find_packages(include=['gluondet', 'gluondet.*']),
    # MXNet comes from an extra, `cpu` or `cu112`: its builds are distinct distributions that
    # write the same `mxnet` package, so the base package requires neither.
    install_requires=[
        'numpy<1.24',
        'scipy',        # Faster R-CNN's sparse ROI Align backward on CPUs
        'opencv-python',
        'pillow',
        'defusedxml',
        'filelock',
        'requests',
        'tqdm',
        'tensorboardX',
        'pyyaml',       # gluondet train's YAML experiment specs
        # what the README promises on any machine: ONNX export, the onnxruntime backend
        # (its CPU build works beside a GPU MXNet), int8 quantization (onnxruntime's needs
        # ml_dtypes), and the plots (curves, PR curves, confusion matrix)
        'onnx',
        'onnxruntime',
        'ml_dtypes',
        'matplotlib',
    ],
    # Heavy or GPU-only parts; gluondet/optional.py names the extra when one is missing.
    extras_require={
        'cpu': ['mxnet==1.9.1'],
        'cu112': CU112,
        'dali': ['nvidia-dali-cuda110'],
        'horovod': ['horovod', 'cloudpickle', 'psutil', 'pyyaml'],
        'tensorrt': ['tensorrt', 'cuda-python'],
        'openvino': ['openvino'],     # the openvino backend (CPU)
        'test': ['pytest', 'pytest-timeout', 'pytest-xdist', 'pycocotools', 'faster-coco-eval',
                 'gluoncv', 'ruff'],
        'docs': ['mkdocs==1.6.1', 'mkdocs-material==9.8.2'],   # make docs
    },
    entry_points={'console_scripts': ['gluondet = gluondet.cli:main']},
    classifiers=[
        'Programming Language :: Python :: 3',
        'License :: OSI Approved :: Apache Software License',
        'Topic :: Scientific/Engineering :: Artificial Intelligence',
    ],
)
