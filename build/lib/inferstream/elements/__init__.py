"""The GStreamer element classes. Loading them routes the ``inferstream`` Python loggers to GStreamer's debug log
(``native.gstlog``), so ``GST_DEBUG=inferstream*:5`` shows the core's messages beside the elements'."""
from inferstream.native.gstlog import route_to_gst_debug

route_to_gst_debug()
