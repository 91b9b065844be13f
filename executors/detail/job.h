#pragma once

#include "weft/executors/work_item.h"

namespace weft::detail {

// The executor vocabulary is public (executors/work_item.h); these names remain for
// weft's own code written before it was.
using weft::CallableJob;
using weft::Job;
using weft::reportEscapedException;
using weft::WorkItem;

}  // namespace weft::detail
