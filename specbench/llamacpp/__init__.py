"""llama.cpp as a comparison engine: finding or building llama-server, running it for a job."""
