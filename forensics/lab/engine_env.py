"""Environment for every process of the lab (imported before numpy, so it imports nothing heavy).

OpenBLAS starts a thread per CPU when numpy is imported and pyarrow's jemalloc starts a purger thread;
these settings stop both, so each lab process holds exactly the threads forensics.lab.engine describes.
"""

QUIET_LIBRARIES = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "JE_ARROW_MALLOC_CONF": "background_thread:false",
}
