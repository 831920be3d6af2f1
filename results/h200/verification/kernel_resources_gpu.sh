source .whl/prefix.sh
export CUDA_HOME=/usr/local/cuda-13.0
cd tools
python3 -c "import numba, numba_cuda, llvmlite; print('numba', numba.__version__, 'numba_cuda', numba_cuda.__version__, 'llvmlite', llvmlite.__version__)"
which ptxas; ptxas --version | tail -1
T0=$(date +%s)
timeout 420 python3 kernel_resources.py --experiments levels --d 32 64 80 --jobs 16 --out $OUT/kernel_resources_gpu.csv 2>&1 | grep -v skipped | tail -40
echo "[$(( $(date +%s) - T0 )) s]"
