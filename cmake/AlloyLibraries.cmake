# OpenBLAS, TurboJPEG, cuDNN and NCCL come with no CMake package (Debian's libopenblas-dev, or beside the
# CUDA toolkit): alloy_import_library finds one's header and library and makes it an imported
# target. The build and the installed AlloyConfig.cmake both call it, so that the exported
# Alloy targets name Alloy::openblas, Alloy::cudnn and Alloy::nccl, found again on the machine
# that uses the package, rather than the paths of the machine that built it.
#
#   alloy_import_library(TARGET HEADER LIBRARY PREFIX [HINTS dir...] [PATH_SUFFIXES dir...])
#
# PREFIX names the cache variables PREFIX_INCLUDE_DIR and PREFIX_LIBRARY (set them to choose
# another copy). Sets PREFIX_FOUND; a missing header or library is left for the caller to
# report (a fatal error in the build, Alloy_FOUND false in the package).
function(alloy_import_library target header library prefix)
  cmake_parse_arguments(PARSE_ARGV 4 arg "" "" "HINTS;PATH_SUFFIXES")
  set(${prefix}_FOUND FALSE PARENT_SCOPE)
  find_path(${prefix}_INCLUDE_DIR ${header} HINTS ${arg_HINTS}
            PATH_SUFFIXES include ${arg_PATH_SUFFIXES})
  find_library(${prefix}_LIBRARY NAMES ${library} HINTS ${arg_HINTS}
               PATH_SUFFIXES lib lib64 ${arg_PATH_SUFFIXES})
  if(NOT ${prefix}_INCLUDE_DIR OR NOT ${prefix}_LIBRARY)
    return()
  endif()
  if(NOT TARGET ${target})
    add_library(${target} UNKNOWN IMPORTED)
    set_target_properties(${target} PROPERTIES
      IMPORTED_LOCATION "${${prefix}_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${${prefix}_INCLUDE_DIR}")
  endif()
  set(${prefix}_FOUND TRUE PARENT_SCOPE)
endfunction()

# The three libraries, with the hints both sides use. WITH_CUDA: cuDNN and NCCL too, next to
# the CUDA toolkit found before (CUDAToolkit_INCLUDE_DIRS, CUDAToolkit_LIBRARY_DIR).
# Sets ALLOY_MISSING_LIBRARIES to what was not found.
macro(alloy_import_libraries with_cuda)
  set(ALLOY_MISSING_LIBRARIES "")
  alloy_import_library(Alloy::openblas cblas.h openblas OPENBLAS
                       PATH_SUFFIXES openblas-pthread openblas)
  if(NOT OPENBLAS_FOUND)
    list(APPEND ALLOY_MISSING_LIBRARIES "OpenBLAS (cblas.h, libopenblas)")
  endif()
  # Optional: without it (or libpng) image folders are unavailable (ALLOY_HAVE_IMAGE_FILES).
  alloy_import_library(Alloy::turbojpeg turbojpeg.h turbojpeg TURBOJPEG)
  if(${with_cuda})
    alloy_import_library(Alloy::cudnn cudnn.h cudnn CUDNN
                         HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_DIR}
                               ${CUDAToolkit_LIBRARY_ROOT})
    if(NOT CUDNN_FOUND)
      list(APPEND ALLOY_MISSING_LIBRARIES "cuDNN (cudnn.h, libcudnn)")
    endif()
    alloy_import_library(Alloy::nccl nccl.h nccl NCCL
                         HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_DIR}
                               ${CUDAToolkit_LIBRARY_ROOT})
    if(NOT NCCL_FOUND)
      list(APPEND ALLOY_MISSING_LIBRARIES "NCCL (nccl.h, libnccl)")
    endif()
  endif()
endmacro()
