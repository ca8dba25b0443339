"""Small private helpers shared by the layers: closing guards and signal handling during
library calls. No public names."""
