"""gluondet: object detection on Apache MXNet Gluon."""
import os
import re

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def read_version():
    with open(os.path.join(HERE, 'gluondet', '__init__.py')) as f:
        return re.search(r"^__version__ = '([^']+)'", f.read(), re.M).group(1)


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
    install_requires=[
        'mxnet==1.9.1',
        'numpy<1.24',
        'scipy',        # Faster R-CNN's sparse ROI Align backward on CPUs
        'opencv-python',
        'pillow',
        'defusedxml',
        'filelock',
        'requests',
        'tqdm',
        'tensorboardX',
    ],
    extras_require={
        'onnx': ['onnx', 'onnxruntime', 'ml_dtypes'],   # ml_dtypes: int8 quantization
        'dali': ['nvidia-dali-cuda110'],
        'horovod': ['horovod', 'cloudpickle', 'psutil', 'pyyaml'],
        'tensorrt': ['onnx', 'tensorrt', 'cuda-python'],
        'test': ['pytest', 'pytest-timeout', 'pytest-xdist', 'pycocotools', 'faster-coco-eval', 'gluoncv',
                 'onnx', 'onnxruntime', 'ml_dtypes', 'matplotlib'],
        'docs': ['matplotlib'],
    },
    entry_points={'console_scripts': ['gluondet = gluondet.cli:main']},
    classifiers=[
        'Programming Language :: Python :: 3',
        'License :: OSI Approved :: Apache Software License',
        'Topic :: Scientific/Engineering :: Artificial Intelligence',
    ],
)
