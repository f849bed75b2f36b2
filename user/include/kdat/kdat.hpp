// libkdat: the whole userspace API of kdat in one include.
#pragma once

#include <kdat/connection_request.hpp>
#include <kdat/device.hpp>
#include <kdat/endpoint.hpp>
#include <kdat/ep_state.hpp>
#include <kdat/error.hpp>
#include <kdat/evd.hpp>
#include <kdat/ia.hpp>
#include <kdat/names.hpp>
#include <kdat/ring.hpp>
#include <kdat/service_point.hpp>
#include <kdat/table.hpp>
#include <kdat/types.hpp>
