/* Host-side f16/bf16 <-> f32 conversions (half.c), shared by libclvarlen and
 * libclvarlen-mpi. Internal: no public symbol. */
#ifndef CV_HALF_H
#define CV_HALF_H

#include <stdint.h>

float cv_half_to_float(uint16_t h);
uint16_t cv_float_to_half(float f);   /* round to nearest even */
float cv_bf16_to_float(uint16_t b);
uint16_t cv_float_to_bf16(float f);   /* round to nearest even, NaN kept quiet */

#endif
