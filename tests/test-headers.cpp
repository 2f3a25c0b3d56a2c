// The public headers must compile as C++ (with -pedantic), as libinput's do:
// runtimes written in C++ include them directly.
#include <clvarlen/clvarlen.h>
#include "config.h"
#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif

int main()
{
    clvarlen_attention_params ap;
    clvarlen_attention_params_init(&ap);
    clvarlen_gdn_params gp;
    clvarlen_gdn_params_init(&gp);
    return clvarlen_version() == CLVARLEN_VERSION && ap.struct_size == sizeof ap &&
                   gp.struct_size == sizeof gp
               ? 0
               : 1;
}
